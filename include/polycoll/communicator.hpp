#pragma once
/// @file communicator.hpp
/// Communicator<Backend>: the CRTP front end every backend derives from. It
/// owns the public surface (the seed surface on addresses and the typed
/// surface on spans), validates every call once, turns run-time DType/ReduceOp
/// into tags, checks the backend's capability traits, and only then calls the
/// backend's `*_impl`.

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include <polycoll/detail/call.hpp>
#include <polycoll/detail/layout.hpp>
#include <polycoll/detail/on_error.hpp>
#include <polycoll/detail/std_parts.hpp>
#include <polycoll/dtype.hpp>
#include <polycoll/error.hpp>
#include <polycoll/flight_record.hpp>
#include <polycoll/group.hpp>
#include <polycoll/reduce_op.hpp>
#include <polycoll/stream_sync.hpp>

namespace polycoll {

/// `split(no_color, key)` leaves the calling rank out: it gets std::nullopt.
inline constexpr std::uint32_t no_color = 0xFFFFFFFFu;

/// Options every backend factory takes last.
struct Options {
  /// Bounds every blocking point (sync, barrier, blocking collectives, split;
  /// Nccl: see docs/nccl.md); none = wait forever. Set it alike on every rank.
  std::optional<std::chrono::milliseconds> op_timeout;
  /// How long a destructor waits for pending work before it logs and releases.
  std::chrono::milliseconds drop_timeout{5000};
  /// Cross-rank fingerprint check before each collective (also POLYCOLL_CHECK=1).
  bool check_consistency = false;
  /// OnError::abort: any Error a call of the communicator would return is
  /// printed as one line to stderr and every rank is stopped (Mpi: MPI_Abort),
  /// like MPI_ERRORS_ARE_FATAL. Also POLYCOLL_ON_ERROR=abort, for the
  /// communicators made after it is set. See docs/reliability.md.
  OnError on_error = OnError::return_error;
  /// Every reduction (all_reduce, reduce_scatter, reduce) combines the ranks'
  /// contributions in rank order, ((x0 OP x1) OP x2) ... OP x(p-1), so a
  /// result depends only on the inputs and the world size: the same bits on
  /// every backend that supports it, every algorithm and every run. Also
  /// POLYCOLL_REPRODUCIBLE=1. Set it alike on every rank. Costs and the
  /// backends' paths: docs/reliability.md ("Reproducible reductions").
  bool reproducible = false;
  /// How many of its last calls a communicator keeps in its flight record
  /// (comm.flight_record(); written to the log sink when a call times out or
  /// on_error aborts); 0 keeps none, at most 65536 (detail::FlightRecorder::max_size)
  /// are kept. See docs/reliability.md ("Flight recorder").
  std::size_t flight_record_size = 64;
};

namespace detail {
/// The options a factory's communicator keeps: `options` with the
/// environment's switches applied (POLYCOLL_ON_ERROR=abort,
/// POLYCOLL_REPRODUCIBLE=1; each switches on, never off). Every factory of
/// every backend passes its options through here, once.
inline Options with_environment(Options options) noexcept {
  options.on_error = on_error_from(options.on_error);
  options.reproducible = options.reproducible || reproducible_from_environment();
  return options;
}
}  // namespace detail

class AnyCommunicator;

/// Capability trait: backend B can reduce elements of D with Op (all_reduce,
/// reduce_scatter). False unless the backend specialises it.
template <class B, DType D, ReduceOp Op>
struct supports_reduction : std::false_type {};

/// Capability trait: backend B can move elements of D (broadcast, all_gather,
/// send, recv). False unless the backend specialises it.
template <class B, DType D>
struct supports_dtype : std::false_type {};

/// True when the pair is valid and B declares it.
template <class B, DType D, ReduceOp Op>
inline constexpr bool supports_reduction_v = is_valid_v<D, Op> && supports_reduction<B, D, Op>::value;

/// True when B declares it moves D.
template <class B, DType D>
inline constexpr bool supports_dtype_v = supports_dtype<B, D>::value;

/// recv and probe from any rank (MPI_ANY_SOURCE). A send rejects it.
inline constexpr std::size_t any_source = std::numeric_limits<std::size_t>::max();
/// recv and probe with any tag (MPI_ANY_TAG); so a send cannot use 0xFFFFFFFF.
inline constexpr std::uint32_t any_tag = 0xFFFFFFFFu;

/// What probe found: the first pending message matching (src, tag), with its
/// actual source and tag, and its length in elements of the probed dtype.
struct MessageInfo {
  /// The rank that sent it (the actual one when probed with any_source).
  std::size_t source = 0;
  /// Its tag (the actual one when probed with any_tag).
  std::uint32_t tag = 0;
  /// Its length in elements of the probed dtype.
  std::size_t count = 0;
};

/// Capability trait: backend B has probe and receives from any_source /
/// any_tag. False unless the backend specialises it (Nccl does not: NCCL
/// matches a receive with one send by position, with no envelope to inspect).
template <class B>
struct supports_probe : std::false_type {};

/// True when B declares probe and wildcard receives.
template <class B>
inline constexpr bool supports_probe_v = supports_probe<B>::value;

namespace detail {
/// A pending message as a backend's probe_impl reports it (the front end turns
/// bytes into elements of the probed dtype).
struct Envelope {
  std::size_t source = 0;
  std::uint32_t tag = 0;
  std::size_t bytes = 0;
};
}  // namespace detail

namespace detail {
template <class T>
T* to_ptr(std::uint64_t address) noexcept {
  return reinterpret_cast<T*>(static_cast<std::uintptr_t>(address));
}
template <class T>
std::uint64_t to_address(T* p) noexcept {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
}

/// A range the typed surface accepts: contiguous, sized, and not a temporary
/// that would dangle before sync() (spans and lvalues are fine).
template <class R>
concept buffer_range =
    std::ranges::contiguous_range<R> && std::ranges::sized_range<R> && std::ranges::borrowed_range<R>;

// What a typed call got instead of a buffer_range: one value, a temporary
// range, or something else. The fallback overloads of the typed calls turn
// each into one short static_assert instead of every overload's constraint
// failure.
template <class R>
inline constexpr bool is_scalar_argument_v =
    std::is_arithmetic_v<std::remove_cvref_t<R>> || is_element_type_v<std::remove_cvref_t<R>>;

template <class R>
inline constexpr bool is_temporary_range_v = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
                                             !std::ranges::borrowed_range<R>;

template <class O>
inline constexpr bool is_op_argument_v =
    is_op_tag_v<std::remove_cvref_t<O>> || std::is_same_v<std::remove_cvref_t<O>, ReduceOp>;

template <class R>
constexpr void reject_buffer_argument() {
  static_assert(!is_temporary_range_v<R>,
                "polycoll: a temporary range as the buffer would dangle before sync() completes the call; "
                "pass an lvalue (a named std::vector) or a std::span");
  static_assert(is_scalar_argument_v<R> || is_temporary_range_v<R>,
                "polycoll: the buffer must be a contiguous sized range: a std::span, or a std::vector or "
                "std::array lvalue");
}

template <class R>
using range_element_t = std::remove_reference_t<std::ranges::range_reference_t<R>>;

template <class R>
using range_value_t = std::remove_cv_t<range_element_t<R>>;

// Aliasing of the standard integer types. A typed call on a standard integer
// type that is not its dtype's own C++ type (`long long`, whose dtype I64 is
// std::int64_t, i.e. `long` on LP64 Linux; `char`, read as std::int8_t or
// std::uint8_t) hands the buffer's address to the backend, which reads and
// writes it as the dtype's type. To type-based alias analysis those are
// different types: in a TU that sees both the caller's accesses and the
// inlined kernels (every typed call instantiates them in the caller's TU), the
// compiler could keep a `long long` value in a register across the kernel's
// `long` stores. So such a call runs between two compiler barriers (an asm
// with a memory clobber): every access of the caller before the call is
// complete when the backend starts, and every access after it reads memory
// again. Work completed later, at sync(), writes the buffer from another
// thread, MPI or the device, never through a typed store of the caller's TU.
// Calls on the dtype's own type get no barrier. all_reduce_value needs none: its
// value travels in a local of the dtype's own type.
inline void compiler_barrier() noexcept {
#if defined(__GNUC__) || defined(__clang__)
  asm volatile("" ::: "memory");
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

template <class T>
struct AliasFence {
  static constexpr bool needed = !std::is_same_v<std::remove_cv_t<T>, canonical_element_t<std::remove_cv_t<T>>>;
  AliasFence() noexcept {
    if constexpr (needed) compiler_barrier();
  }
  ~AliasFence() {
    if constexpr (needed) compiler_barrier();
  }
  AliasFence(const AliasFence&) = delete;
  AliasFence& operator=(const AliasFence&) = delete;
};

template <class T>
constexpr void check_element_type() {
  static_assert(is_element_type_v<T>,
                "polycoll: unsupported element type; use double, float, f16, bf16, f8e4m3, f8e5m2, "
                "a standard integer type (char, signed/unsigned char, short, int, long, long long and "
                "their unsigned forms, std::int8_t..std::uint64_t), bool, std::complex<float> or "
                "std::complex<double>");
}
}  // namespace detail

/// The front end. A backend `B` derives as `class B : public Communicator<B>`
/// and provides `world_size_impl()`, `rank_impl()`, the `*_impl` operations
/// taking `dtype_tag<D>` (and `op_tag<Op>` for reductions) with typed pointers,
/// `sync_impl()`, `barrier_impl()`, `split_impl()`, and
/// `static constexpr std::string_view backend_name`; optionally
/// `moved_from_impl()` (see error()), and for Options::on_error `options()`
/// (or `on_error_impl()`) and `abort_impl(const Error&)` (see returning()).
/// See docs/design.md.
template <class Backend>
class Communicator {
 public:
  /// Number of ranks.
  [[nodiscard]] std::size_t world_size() const noexcept { return self().world_size_impl(); }
  /// This rank, in [0, world_size()).
  [[nodiscard]] std::size_t rank() const noexcept { return self().rank_impl(); }

  // ---------------------------------------------------------------- seed surface
  // Each call runs its check_<call> (the checks it shares with the typed
  // surface), turns the run-time (DType, ReduceOp) into tags, and hands the
  // tags to <call>_tagged, the one place that calls the backend.

  /// In-place all-reduce of `count` elements at `ptr`.
  [[nodiscard]] Status all_reduce(std::uint64_t ptr, std::size_t count, DType dtype, ReduceOp op);

  /// Out-of-place all-reduce, like MPI_Allreduce and ncclAllReduce: `recv`
  /// gets the reduction of every rank's `send` (`count` elements each) and
  /// `send` is only read. `send == recv` is the in-place call; any other
  /// overlap is Errc::invalid_argument.
  [[nodiscard]] Status all_reduce(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype,
                                  ReduceOp op);

  /// Seed form of all_reduce_value: reduces the one element at the host
  /// address `value` over all ranks, in place, and returns complete (it
  /// completes all work posted before it, like sync()).
  [[nodiscard]] Status all_reduce_value(std::uint64_t value, DType dtype, ReduceOp op);

  /// In-place broadcast of `count` elements at `ptr` from `root`.
  [[nodiscard]] Status broadcast(std::uint64_t ptr, std::size_t count, DType dtype, std::size_t root);

  /// Gathers `count` elements from every rank into `recv` (count * world_size, rank order).
  [[nodiscard]] Status all_gather(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype);

  /// Reduces `send` (count * world_size) and leaves block `rank()` (count elements) in `recv`.
  [[nodiscard]] Status reduce_scatter(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype,
                                      ReduceOp op);

  /// Non-blocking send of `count` elements to `dest`; complete after sync().
  [[nodiscard]] Status send(std::uint64_t ptr, std::size_t count, DType dtype, std::size_t dest, std::uint32_t tag);

  /// Non-blocking receive of `count` elements from `src`; complete after sync().
  [[nodiscard]] Status recv(std::uint64_t ptr, std::size_t count, DType dtype, std::size_t src, std::uint32_t tag);

  /// Non-blocking probe (like MPI_Iprobe): the first pending message from
  /// `src` (or any_source) with `tag` (or any_tag) that a recv posted now
  /// would match, or std::nullopt when none has arrived. The message stays
  /// pending; `recv` from its `source` with its `tag` takes it. Its count is in
  /// elements of `dtype` (Errc::mismatch when its bytes are not a whole number
  /// of them). Errc::unsupported where supports_probe is false (Nccl).
  [[nodiscard]] Result<std::optional<MessageInfo>> probe(std::size_t src, std::uint32_t tag, DType dtype);

  /// Reduces `count` elements of every rank's `send` into `recv` on `root`.
  /// `recv` is used on the root only (elsewhere it may be 0); in place on the
  /// root when `recv == send`.
  [[nodiscard]] Status reduce(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype, ReduceOp op,
                              std::size_t root);

  /// Gathers `count` elements from every rank into `recv` on `root`
  /// (count * world_size, rank order); `recv` is used on the root only. In
  /// place on the root when `send` is its own block of `recv`.
  [[nodiscard]] Status gather(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype,
                              std::size_t root);

  /// Sends block q of `send` on `root` (count * world_size) to rank q's `recv`
  /// (count); `send` is used on the root only. In place on the root when
  /// `recv` is its own block of `send`.
  [[nodiscard]] Status scatter(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype,
                               std::size_t root);

  /// Block q of `send` (count elements) goes to rank q, which stores it as block
  /// `rank()` of its `recv`; both hold count * world_size elements and must not overlap.
  [[nodiscard]] Status all_to_all(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype);

  /// all_gather with per-rank counts: rank q contributes `recv_counts[q]`
  /// elements (this rank's `send_count` must equal `recv_counts[rank()]`),
  /// stored at element offset `displs[q]` of `recv`; empty `displs` packs the
  /// blocks in rank order. In place when `send` is this rank's block of `recv`.
  /// The call's count in messages and fingerprints is the total gathered.
  [[nodiscard]] Status all_gather_v(std::uint64_t send, std::size_t send_count, std::uint64_t recv,
                                    std::span<const std::size_t> recv_counts, std::span<const std::size_t> displs,
                                    DType dtype);

  /// all_to_all with per-rank counts: `send_counts[q]` elements at offset
  /// `send_displs[q]` of `send` go to rank q, which receives them as its
  /// `recv_counts[rank()]` elements at offset `recv_displs[rank()]` of `recv`
  /// (the two counts of a pair must be equal). Empty displacements pack the
  /// blocks in rank order. `send` and `recv` must not overlap.
  [[nodiscard]] Status all_to_all_v(std::uint64_t send, std::span<const std::size_t> send_counts,
                                    std::span<const std::size_t> send_displs, std::uint64_t recv,
                                    std::span<const std::size_t> recv_counts,
                                    std::span<const std::size_t> recv_displs, DType dtype);

  /// send to `dest` and recv from `src` as one group (non-blocking, complete
  /// after sync(), like send and recv): the exchange a halo swap needs.
  [[nodiscard]] Status send_recv(std::uint64_t send, std::size_t send_count, std::size_t dest, std::uint64_t recv,
                                 std::size_t recv_count, std::size_t src, DType dtype, std::uint32_t tag);

  /// Opens a group: work submitted until the matching group_end() is issued
  /// as one batch (see group.hpp). Groups nest; the outermost end issues.
  [[nodiscard]] Status group_start() {
    if constexpr (requires { self().group_start_impl(); }) return returning(self().group_start_impl());
    else return {};  // a backend without groups: nothing to batch
  }
  /// Closes the innermost open group; Errc::invalid_argument without one.
  [[nodiscard]] Status group_end() {
    if constexpr (requires { self().group_end_impl(); }) return returning(self().group_end_impl());
    else return {};
  }
  /// `auto g = comm.group(); ...; g.end()`: group_start() now, group_end() at
  /// end() or destruction.
  [[nodiscard]] Group<Communicator> group() { return Group<Communicator>(*this); }

  /// Completes all pending work: outputs are valid and inputs reusable.
  [[nodiscard]] Status sync() {
    detail::RecordGuard open = open_record(detail::CallDesc::plain(detail::Call::sync));
    return close_record(open, self().sync_impl());
  }

  /// Waits for every rank (implies sync()).
  [[nodiscard]] Status barrier() {
    detail::RecordGuard open = open_record(detail::CallDesc::plain(detail::Call::barrier));
    return close_record(open, self().barrier_impl());
  }

  /// Collective: ranks with equal `color` form a communicator ordered by
  /// (key, old rank); `no_color` gives std::nullopt to the caller.
  [[nodiscard]] Result<std::optional<Backend>> split(std::uint32_t color, std::uint32_t key) {
    detail::RecordGuard open = open_record(detail::CallDesc::plain(detail::Call::split));
    return close_record(open, self().split_impl(color, key));
  }

  /// This communicator's last calls (at most Options::flight_record_size),
  /// oldest first: every call that reached the backend except probe and the
  /// group calls. Empty for a backend without a recorder and a moved-from
  /// communicator. Safe to call from any thread, also while calls run.
  [[nodiscard]] std::vector<CallRecord> flight_record() const {
    if constexpr (requires(const Backend& b) { b.flight_record_impl(); }) {
      return self().flight_record_impl();  // AnyCommunicator: the held backend's record
    } else if constexpr (has_recorder()) {
      if (const detail::FlightRecorder* fr = self().flight_recorder_impl()) return fr->records();
    }
    return {};
  }

  /// The stream operations, or nullptr for a backend without streams.
  [[nodiscard]] StreamSyncOps* as_stream_sync() noexcept {
    if constexpr (requires(Backend& b) { b.as_stream_sync_impl(); }) {
      return self().as_stream_sync_impl();
    } else {
      return nullptr;
    }
  }

  // ---------------------------------------------------------------- typed surface
  // The element type fixes the dtype, so a typed call never visits the dtype:
  // after its span checks and the seed call's own check_<call> it hands
  // dtype_tag<D> (and op_tag<Op>, or a visit of the run-time op alone) to
  // <call>_tagged. A call instantiates the backend and kernels of its one
  // element type only.

  /// In-place all-reduce with a compile-time op: `comm.all_reduce(std::span(v), polycoll::sum)`.
  template <detail::buffer_range R, ReduceOp Op>
  [[nodiscard]] Status all_reduce(R&& buf, op_tag<Op> op) {
    using T = detail::range_element_t<R>;
    static_assert(!std::is_const_v<T>, "polycoll::Communicator::all_reduce: the buffer is written; pass a mutable span");
    detail::check_element_type<T>();
    constexpr DType D = dtype_of_v<T>;
    const detail::AliasFence<T> fence;
    static_assert(is_valid_v<D, Op>,
                  "polycoll::Communicator::all_reduce: this op is not defined for this element type "
                  "(min/max on complex, avg on integers or bool)");
    static_assert(supports_reduction_v<Backend, D, Op>,
                  "polycoll::Communicator::all_reduce: the backend does not support this (element type, op) pair");
    const std::span<T> s(buf);
    const std::uint64_t p = detail::to_address(s.data());
    const auto c = detail::CallDesc::reduction(detail::Call::all_reduce, s.size(), D, Op);
    if (auto st = check_all_reduce(c, p, s.size(), D); !st) return st;
    return all_reduce_tagged(dtype_tag<D>{}, op, p, s.size());
  }

  /// In-place all-reduce with a run-time op (checked at run time).
  template <detail::buffer_range R>
  [[nodiscard]] Status all_reduce(R&& buf, ReduceOp op) {
    using T = detail::range_element_t<R>;
    static_assert(!std::is_const_v<T>, "polycoll::Communicator::all_reduce: the buffer is written; pass a mutable span");
    detail::check_element_type<T>();
    constexpr DType D = dtype_of_v<T>;
    const detail::AliasFence<T> fence;
    const std::span<T> s(buf);
    const std::uint64_t p = detail::to_address(s.data());
    const auto c = detail::CallDesc::reduction(detail::Call::all_reduce, s.size(), D, op);
    if (auto st = check_all_reduce(c, p, s.size(), D); !st) return st;
    return dispatch_op<D>(c, [&](auto o) { return all_reduce_tagged(dtype_tag<D>{}, o, p, s.size()); });
  }

  /// Out-of-place all-reduce with a compile-time op, like MPI_Allreduce:
  /// `recv` gets the reduction of every rank's `send`; `recv.size()` must be
  /// `send.size()`. The same memory for both is the in-place call; a partial
  /// overlap is Errc::invalid_argument.
  template <detail::buffer_range S, detail::buffer_range R, ReduceOp Op>
  [[nodiscard]] Status all_reduce(S&& send, R&& recv, op_tag<Op> op) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    check_pair<detail::Call::all_reduce, TS, TR>();
    constexpr DType D = dtype_of_v<TR>;
    const detail::AliasFence<TR> fence;
    static_assert(is_valid_v<D, Op>,
                  "polycoll::Communicator::all_reduce: this op is not defined for this element type "
                  "(min/max on complex, avg on integers or bool)");
    static_assert(supports_reduction_v<Backend, D, Op>,
                  "polycoll::Communicator::all_reduce: the backend does not support this (element type, op) pair");
    return all_reduce_typed(std::span<const TS>(send), std::span<TR>(recv), Op,
                            [&](const detail::CallDesc&, auto... a) {
      return all_reduce_tagged(dtype_tag<D>{}, op, a...);
    });
  }

  /// Out-of-place all-reduce with a run-time op.
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status all_reduce(S&& send, R&& recv, ReduceOp op) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    check_pair<detail::Call::all_reduce, TS, TR>();
    constexpr DType D = dtype_of_v<TR>;
    const detail::AliasFence<TR> fence;
    return all_reduce_typed(std::span<const TS>(send), std::span<TR>(recv), op,
                            [&](const detail::CallDesc& c, auto... a) {
      return dispatch_op<D>(c, [&](auto o) { return all_reduce_tagged(dtype_tag<D>{}, o, a...); });
    });
  }

  /// Not callable: one value, a temporary or a non-range as the buffer is a
  /// short compile error (use all_reduce_value for one value).
  template <class R, class O>
    requires(!detail::buffer_range<R> && detail::is_op_argument_v<O>)
  [[nodiscard]] Status all_reduce(R&&, O) {
    static_assert(!detail::is_scalar_argument_v<R>,
                  "polycoll::Communicator::all_reduce takes a buffer (a span or contiguous range), not one value; "
                  "for one value use all_reduce_value(x, op), which returns the reduced value");
    detail::reject_buffer_argument<R>();
    return {};
  }
  /// Not callable: the out-of-place form's misuse, as above.
  template <class S, class R, class O>
    requires(!(detail::buffer_range<S> && detail::buffer_range<R>) && detail::is_op_argument_v<O>)
  [[nodiscard]] Status all_reduce(S&&, R&&, O) {
    static_assert(!detail::is_scalar_argument_v<S> && !detail::is_scalar_argument_v<R>,
                  "polycoll::Communicator::all_reduce takes buffers (spans or contiguous ranges), not values; "
                  "for one value use all_reduce_value(x, op), which returns the reduced value");
    if constexpr (!detail::buffer_range<S>) detail::reject_buffer_argument<S>();
    else detail::reject_buffer_argument<R>();
    return {};
  }

  /// All-reduce of one value, returned: `auto s = comm.all_reduce_value(x, polycoll::sum);`.
  /// It returns complete on every backend. Like MPI_Allreduce it leaves
  /// earlier sends and receives pending, except under Mpi's nonblocking policy
  /// (and on a custom backend whose collectives complete at sync()), where it
  /// completes as sync() does. On Nccl `x` is host memory (the value goes
  /// through a device scratch word).
  template <class T, ReduceOp Op>
  [[nodiscard]] Result<T> all_reduce_value(T x, op_tag<Op> op) {
    detail::check_element_type<T>();
    constexpr DType D = dtype_of_v<T>;
    static_assert(is_valid_v<D, Op>,
                  "polycoll::Communicator::all_reduce_value: this op is not defined for this element type "
                  "(min/max on complex, avg on integers or bool)");
    static_assert(supports_reduction_v<Backend, D, Op>,
                  "polycoll::Communicator::all_reduce_value: the backend does not support this (element type, op) "
                  "pair");
    // The value travels as the dtype's own type (a long long as std::int64_t),
    // the type the backend writes, so no barrier is needed (see AliasFence).
    typename dtype_tag<D>::type v = static_cast<typename dtype_tag<D>::type>(x);
    if (auto st = all_reduce_value_tagged(dtype_tag<D>{}, op, detail::to_address(&v)); !st) {
      return tl::unexpected(std::move(st.error()));
    }
    return static_cast<T>(v);
  }

  /// All-reduce of one value with a run-time op (checked at run time).
  template <class T>
  [[nodiscard]] Result<T> all_reduce_value(T x, ReduceOp op) {
    detail::check_element_type<T>();
    constexpr DType D = dtype_of_v<T>;
    const auto c = detail::CallDesc::reduction(detail::Call::all_reduce, 1, D, op);
    typename dtype_tag<D>::type v = static_cast<typename dtype_tag<D>::type>(x);  // as above
    const std::uint64_t p = detail::to_address(&v);
    if (auto st = dispatch_op<D>(c, [&](auto o) { return all_reduce_value_tagged(dtype_tag<D>{}, o, p); }); !st) {
      return tl::unexpected(std::move(st.error()));
    }
    return static_cast<T>(v);
  }

  /// In-place broadcast from `root`.
  template <detail::buffer_range R>
  [[nodiscard]] Status broadcast(R&& buf, std::size_t root) {
    using T = detail::range_element_t<R>;
    static_assert(!std::is_const_v<T>, "polycoll::Communicator::broadcast: the buffer is written; pass a mutable span");
    check_movable<T>();
    constexpr DType D = dtype_of_v<T>;
    const detail::AliasFence<T> fence;
    const std::span<T> s(buf);
    const std::uint64_t p = detail::to_address(s.data());
    const auto c = detail::CallDesc::rooted(detail::Call::broadcast, s.size(), D, root);
    if (auto st = check_broadcast(c, p, s.size(), D, root); !st) return st;
    return broadcast_tagged(dtype_tag<D>{}, p, s.size(), root);
  }

  /// Not callable: one value, a temporary or a non-range as the buffer is a
  /// short compile error.
  template <class R>
    requires(!detail::buffer_range<R>)
  [[nodiscard]] Status broadcast(R&&, std::size_t) {
    static_assert(!detail::is_scalar_argument_v<R>,
                  "polycoll::Communicator::broadcast takes a buffer (a span or contiguous range), not one value; "
                  "for one value pass std::span(&x, 1)");
    detail::reject_buffer_argument<R>();
    return {};
  }

  /// all_gather: `recv.size()` must be `send.size() * world_size()`.
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status all_gather(S&& send, R&& recv) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    static_assert(std::is_same_v<TS, TR>, "polycoll::Communicator::all_gather: send and recv element types differ");
    static_assert(!std::is_const_v<TR>, "polycoll::Communicator::all_gather: recv is written; pass a mutable span");
    check_movable<TR>();
    constexpr DType D = dtype_of_v<TR>;
    const detail::AliasFence<TR> fence;
    const std::span<const TS> s(send);
    const std::span<TR> r(recv);
    const auto c = detail::CallDesc::movement(detail::Call::all_gather, s.size(), D);
    if (auto st = check_span_sizes(c, r.size(), s.size(), "recv.size()", "send.size()"); !st) return st;
    const std::uint64_t sa = detail::to_address(s.data()), ra = detail::to_address(r.data());
    if (auto st = check_all_gather(c, sa, ra, s.size(), D); !st) return st;
    return all_gather_tagged(dtype_tag<D>{}, sa, ra, s.size());
  }

  /// reduce_scatter with a compile-time op: `send.size()` must be `recv.size() * world_size()`.
  template <detail::buffer_range S, detail::buffer_range R, ReduceOp Op>
  [[nodiscard]] Status reduce_scatter(S&& send, R&& recv, op_tag<Op> op) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    static_assert(std::is_same_v<TS, TR>, "polycoll::Communicator::reduce_scatter: send and recv element types differ");
    static_assert(!std::is_const_v<TR>, "polycoll::Communicator::reduce_scatter: recv is written; pass a mutable span");
    detail::check_element_type<TR>();
    constexpr DType D = dtype_of_v<TR>;
    const detail::AliasFence<TR> fence;
    static_assert(is_valid_v<D, Op>,
                  "polycoll::Communicator::reduce_scatter: this op is not defined for this element type "
                  "(min/max on complex, avg on integers or bool)");
    static_assert(supports_reduction_v<Backend, D, Op>,
                  "polycoll::Communicator::reduce_scatter: the backend does not support this (element type, op) pair");
    return reduce_scatter_typed(std::span<const TS>(send), std::span<TR>(recv), Op,
                                [&](const detail::CallDesc&, auto... a) {
      return reduce_scatter_tagged(dtype_tag<D>{}, op, a...);
    });
  }

  /// reduce_scatter with a run-time op.
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status reduce_scatter(S&& send, R&& recv, ReduceOp op) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    static_assert(std::is_same_v<TS, TR>, "polycoll::Communicator::reduce_scatter: send and recv element types differ");
    static_assert(!std::is_const_v<TR>, "polycoll::Communicator::reduce_scatter: recv is written; pass a mutable span");
    detail::check_element_type<TR>();
    constexpr DType D = dtype_of_v<TR>;
    const detail::AliasFence<TR> fence;
    return reduce_scatter_typed(std::span<const TS>(send), std::span<TR>(recv), op,
                                [&](const detail::CallDesc& c, auto... a) {
      return dispatch_op<D>(c, [&](auto o) { return reduce_scatter_tagged(dtype_tag<D>{}, o, a...); });
    });
  }

  /// Non-blocking typed send.
  template <detail::buffer_range R>
  [[nodiscard]] Status send(R&& buf, std::size_t dest, std::uint32_t tag) {
    using T = detail::range_value_t<R>;
    check_movable<T>();
    constexpr DType D = dtype_of_v<T>;
    const detail::AliasFence<T> fence;
    const std::span<const T> s(buf);
    const std::uint64_t p = detail::to_address(s.data());
    const auto c = detail::CallDesc::p2p(detail::Call::send, s.size(), D, dest, tag);
    if (auto st = check_p2p(c, p, s.size(), D, dest, "dest"); !st) return st;
    return send_tagged(dtype_tag<D>{}, p, s.size(), dest, tag);
  }

  /// Not callable: one value, a temporary or a non-range as the buffer is a
  /// short compile error.
  template <class R>
    requires(!detail::buffer_range<R>)
  [[nodiscard]] Status send(R&&, std::size_t, std::uint32_t) {
    static_assert(!detail::is_scalar_argument_v<R>,
                  "polycoll::Communicator::send takes a buffer (a span or contiguous range), not one value; "
                  "for one value pass std::span(&x, 1), which must stay valid until sync()");
    detail::reject_buffer_argument<R>();
    return {};
  }

  /// Non-blocking typed receive.
  template <detail::buffer_range R>
  [[nodiscard]] Status recv(R&& buf, std::size_t src, std::uint32_t tag) {
    using T = detail::range_element_t<R>;
    static_assert(!std::is_const_v<T>, "polycoll::Communicator::recv: the buffer is written; pass a mutable span");
    check_movable<T>();
    constexpr DType D = dtype_of_v<T>;
    const detail::AliasFence<T> fence;
    const std::span<T> s(buf);
    const std::uint64_t p = detail::to_address(s.data());
    const auto c = detail::CallDesc::p2p(detail::Call::recv, s.size(), D, src, tag);
    if (auto st = check_p2p(c, p, s.size(), D, src, "src"); !st) return st;
    return recv_tagged(dtype_tag<D>{}, p, s.size(), src, tag);
  }

  /// Typed probe: as the seed probe, the count in elements of T. A compile-time
  /// error on a backend without probe (`supports_probe<B>` false: Nccl).
  template <class T>
  [[nodiscard]] Result<std::optional<MessageInfo>> probe(std::size_t src, std::uint32_t tag) {
    check_movable<T>();
    static_assert(supports_probe_v<Backend>,
                  "polycoll::Communicator::probe: this backend has no probe (supports_probe<B> is false; Nccl "
                  "matches sends and receives by position, with no message envelope to inspect)");
    return self().probe(src, tag, dtype_of_v<T>);
  }

  /// Not callable: one value, a temporary or a non-range as the buffer is a
  /// short compile error.
  template <class R>
    requires(!detail::buffer_range<R>)
  [[nodiscard]] Status recv(R&&, std::size_t, std::uint32_t) {
    static_assert(!detail::is_scalar_argument_v<R>,
                  "polycoll::Communicator::recv takes a buffer (a span or contiguous range), not one value; "
                  "for one value pass std::span(&x, 1), which must stay valid until sync()");
    detail::reject_buffer_argument<R>();
    return {};
  }

  /// Typed reduce with a compile-time op: on the root `recv.size()` must be
  /// `send.size()`; elsewhere `recv` is not used (pass an empty span).
  template <detail::buffer_range S, detail::buffer_range R, ReduceOp Op>
  [[nodiscard]] Status reduce(S&& send, R&& recv, op_tag<Op> op, std::size_t root) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    check_pair<detail::Call::reduce, TS, TR>();
    constexpr DType D = dtype_of_v<TR>;
    const detail::AliasFence<TR> fence;
    static_assert(is_valid_v<D, Op>,
                  "polycoll::Communicator::reduce: this op is not defined for this element type "
                  "(min/max on complex, avg on integers or bool)");
    static_assert(supports_reduction_v<Backend, D, Op>,
                  "polycoll::Communicator::reduce: the backend does not support this (element type, op) pair");
    return reduce_typed(std::span<const TS>(send), std::span<TR>(recv), Op, root,
                        [&](const detail::CallDesc& c, auto... a) {
      return reduce_tagged(c, dtype_tag<D>{}, op, a...);
    });
  }

  /// Typed reduce with a run-time op.
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status reduce(S&& send, R&& recv, ReduceOp op, std::size_t root) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    check_pair<detail::Call::reduce, TS, TR>();
    constexpr DType D = dtype_of_v<TR>;
    const detail::AliasFence<TR> fence;
    return reduce_typed(std::span<const TS>(send), std::span<TR>(recv), op, root,
                        [&](const detail::CallDesc& c, auto... a) {
      return dispatch_op<D>(c, [&](auto o) { return reduce_tagged(c, dtype_tag<D>{}, o, a...); });
    });
  }

  /// Typed gather: on the root `recv.size()` must be `send.size() * world_size()`.
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status gather(S&& send, R&& recv, std::size_t root) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    check_pair<detail::Call::gather, TS, TR>();
    check_movable<TR>();
    constexpr DType D = dtype_of_v<TR>;
    const detail::AliasFence<TR> fence;
    const std::span<const TS> s(send);
    const std::span<TR> r(recv);
    const auto c = detail::CallDesc::rooted(detail::Call::gather, s.size(), D, root);
    if (rank() == root) {
      if (auto st = check_span_sizes(c, r.size(), s.size(), "recv.size()", "send.size()"); !st) return st;
    }
    const std::uint64_t sa = detail::to_address(s.data()), ra = detail::to_address(r.data());
    if (auto st = check_gather(c, sa, ra, s.size(), root); !st) return st;
    return gather_tagged(c, dtype_tag<D>{}, sa, ra, s.size(), root);
  }

  /// Typed scatter: on the root `send.size()` must be `recv.size() * world_size()`.
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status scatter(S&& send, R&& recv, std::size_t root) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    check_pair<detail::Call::scatter, TS, TR>();
    check_movable<TR>();
    constexpr DType D = dtype_of_v<TR>;
    const detail::AliasFence<TR> fence;
    const std::span<const TS> s(send);
    const std::span<TR> r(recv);
    const auto c = detail::CallDesc::rooted(detail::Call::scatter, r.size(), D, root);
    if (rank() == root) {
      if (auto st = check_span_sizes(c, s.size(), r.size(), "send.size()", "recv.size()"); !st) return st;
    }
    const std::uint64_t sa = detail::to_address(s.data()), ra = detail::to_address(r.data());
    if (auto st = check_scatter(c, sa, ra, r.size(), root); !st) return st;
    return scatter_tagged(c, dtype_tag<D>{}, sa, ra, r.size(), root);
  }

  /// Typed all_to_all: `send.size() == recv.size()`, a multiple of `world_size()`.
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status all_to_all(S&& send, R&& recv) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    check_pair<detail::Call::all_to_all, TS, TR>();
    check_movable<TR>();
    constexpr DType D = dtype_of_v<TR>;
    const detail::AliasFence<TR> fence;
    const std::span<const TS> s(send);
    const std::span<TR> r(recv);
    const std::size_t w = std::max<std::size_t>(world_size(), 1);
    const auto c = detail::CallDesc::movement(detail::Call::all_to_all, r.size() / w, D);
    if (s.size() != r.size() || r.size() % w != 0) {
      return reject(Errc::invalid_argument, c,
                    detail::cat("send.size() ", s.size(), " and recv.size() ", r.size(),
                                " must be equal and a multiple of world_size ", w));
    }
    const std::uint64_t sa = detail::to_address(s.data()), ra = detail::to_address(r.data());
    if (auto st = check_all_to_all(c, sa, ra, r.size() / w, D); !st) return st;
    return all_to_all_tagged(c, dtype_tag<D>{}, sa, ra, r.size() / w);
  }

  /// Typed all_gather_v: `counts[q]` elements from rank q at `displs[q]` of
  /// `recv` (empty `displs`: packed); `send.size()` must be `counts[rank()]`
  /// and `recv` must hold every block.
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status all_gather_v(S&& send, R&& recv, std::span<const std::size_t> counts,
                                    std::span<const std::size_t> displs = {}) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    check_pair<detail::Call::all_gather_v, TS, TR>();
    check_movable<TR>();
    constexpr DType D = dtype_of_v<TR>;
    const detail::AliasFence<TR> fence;
    const std::span<const TS> s(send);
    const std::span<TR> r(recv);
    const auto c = detail::CallDesc::movement(detail::Call::all_gather_v, s.size(), D);
    std::size_t extent = 0;
    if (auto st = check_v(c, counts, displs, "counts", "displs", extent); !st) return st;
    if (auto st = check_extent(c, r.size(), extent, "recv"); !st) return st;
    // From here on the call is the seed call's, named by its total count.
    const auto cv = all_gather_v_desc(s.size(), counts, D);
    const std::uint64_t sa = detail::to_address(s.data()), ra = detail::to_address(r.data());
    if (auto st = check_all_gather_v(cv, sa, s.size(), ra, counts, displs, D); !st) return st;
    return all_gather_v_tagged(cv, dtype_tag<D>{}, sa, s.size(), ra, layout_of(counts, displs));
  }

  /// Typed all_to_all_v with packed blocks (displacements: prefix sums of the counts).
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status all_to_all_v(S&& send, std::span<const std::size_t> send_counts, R&& recv,
                                    std::span<const std::size_t> recv_counts) {
    return all_to_all_v(send, send_counts, std::span<const std::size_t>{}, recv, recv_counts,
                        std::span<const std::size_t>{});
  }

  /// Typed all_to_all_v with explicit displacements (elements).
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status all_to_all_v(S&& send, std::span<const std::size_t> send_counts,
                                    std::span<const std::size_t> send_displs, R&& recv,
                                    std::span<const std::size_t> recv_counts,
                                    std::span<const std::size_t> recv_displs) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    check_pair<detail::Call::all_to_all_v, TS, TR>();
    check_movable<TR>();
    constexpr DType D = dtype_of_v<TR>;
    const detail::AliasFence<TR> fence;
    const std::span<const TS> s(send);
    const std::span<TR> r(recv);
    const auto c = detail::CallDesc::movement(detail::Call::all_to_all_v, detail::npos, D);
    std::size_t send_extent = 0, recv_extent = 0;
    if (auto st = check_v(c, send_counts, send_displs, "send_counts", "send_displs", send_extent); !st) return st;
    if (auto st = check_v(c, recv_counts, recv_displs, "recv_counts", "recv_displs", recv_extent); !st) return st;
    if (auto st = check_extent(c, s.size(), send_extent, "send"); !st) return st;
    if (auto st = check_extent(c, r.size(), recv_extent, "recv"); !st) return st;
    const std::uint64_t sa = detail::to_address(s.data()), ra = detail::to_address(r.data());
    if (auto st = check_all_to_all_v(c, sa, send_counts, send_displs, ra, recv_counts, recv_displs, D); !st)
      return st;
    return all_to_all_v_tagged(c, dtype_tag<D>{}, sa, layout_of(send_counts, send_displs), ra,
                               layout_of(recv_counts, recv_displs));
  }

  /// Typed send_recv: `send` to `dest` and `recv` from `src`, as one group.
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status send_recv(S&& send, std::size_t dest, R&& recv, std::size_t src, std::uint32_t tag) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    check_pair<detail::Call::send_recv, TS, TR>();
    check_movable<TR>();
    constexpr DType D = dtype_of_v<TR>;
    const detail::AliasFence<TR> fence;
    const std::span<const TS> s(send);
    const std::span<TR> r(recv);
    const std::uint64_t sa = detail::to_address(s.data()), ra = detail::to_address(r.data());
    const auto c = detail::CallDesc::p2p(detail::Call::send_recv, s.size(), D, dest, tag);
    if (auto st = check_send_recv(c, sa, s.size(), dest, ra, r.size(), src, D); !st) return st;
    // check_send_recv covers what the seed send and recv would check again.
    if (auto st = group_start(); !st) return st;
    Status sent = send_tagged(dtype_tag<D>{}, sa, s.size(), dest, tag);
    Status received = sent ? recv_tagged(dtype_tag<D>{}, ra, r.size(), src, tag) : Status{};
    Status ended = group_end();
    if (!sent) return sent;
    if (!received) return received;
    return ended;
  }

 protected:
  /// Only backends construct, copy and move the (stateless) front end.
  Communicator() = default;
  /// The front end has no state; backends decide whether they copy.
  Communicator(const Communicator&) = default;
  /// The front end has no state; backends move theirs.
  Communicator(Communicator&&) noexcept = default;
  /// See the copy constructor.
  Communicator& operator=(const Communicator&) = default;
  /// See the move constructor.
  Communicator& operator=(Communicator&&) noexcept = default;
  /// Not virtual: a `Communicator<B>` is never deleted as such.
  ~Communicator() = default;

  /// An Error about call `c` spelled with this rank, world and backend. On a
  /// moved-from communicator (a backend that has that state says so through
  /// `moved_from_impl()`) every error is that one: its world and rank are
  /// placeholders, so a range or size complaint about them would mislead.
  /// Checked here, on the error path only; calls that pass validation reach
  /// the backend, which reports the moved-from state itself.
  [[nodiscard]] Error error(Errc code, const detail::CallDesc& c, std::string_view what, int native = 0) const {
    if constexpr (requires(const Backend& b) { { b.moved_from_impl() } -> std::same_as<bool>; }) {
      if (self().moved_from_impl()) return detail::moved_from_error(c, name_of_backend());
    }
    return detail::call_error(code, c, rank(), world_size(), name_of_backend(), what, native);
  }

  /// The backend's static `backend_name`, or AnyCommunicator's run-time `backend_name()` (its held backend's).
  [[nodiscard]] std::string_view name_of_backend() const noexcept {
    if constexpr (requires { self().backend_name(); }) {
      return self().backend_name();
    } else {
      return Backend::backend_name;
    }
  }

 private:
  // Its table applies the held backend's on_error (on_error_setting, abort_all).
  friend class AnyCommunicator;

  Backend& self() noexcept { return static_cast<Backend&>(*this); }
  const Backend& self() const noexcept { return static_cast<const Backend&>(*this); }

  // ------------------------------------------------------------ Options::on_error
  // Every Error a call returns to its caller passes one of two points: reject()
  // makes the front end's own (argument checks, dispatch), returning() takes
  // what the backend returns (<call>_tagged, sync, barrier, split, groups).
  // Errors the library makes and does not return (a destructor's log, an
  // internal retry) pass neither, so they never abort.

  // The backend's on_error_impl(), else its options().on_error (which the
  // factories resolved against POLYCOLL_ON_ERROR); return_error for a
  // backend with neither, and for a moved-from one (whose options() are the
  // defaults: it has no communicator to abort).
  [[nodiscard]] OnError on_error_setting() const noexcept {
    if constexpr (requires(const Backend& b) { { b.on_error_impl() } -> std::same_as<OnError>; }) {
      return self().on_error_impl();
    } else if constexpr (requires(const Backend& b) { { b.options().on_error } -> std::convertible_to<OnError>; }) {
      return self().options().on_error;
    } else {
      return OnError::return_error;
    }
  }

  // Stops every rank: the backend's abort_impl (MPI_Abort, aborting the
  // Threads world, ncclCommAbort), and std::abort() should it return or be
  // absent. The fatal line is printed before.
  [[noreturn]] void abort_ranks(const Error& e) const noexcept {
    if constexpr (requires(const Backend& b) { b.abort_impl(e); }) self().abort_impl(e);
    std::abort();
  }

  void on_failure(const Error& e) const noexcept {
    if (on_error_setting() == OnError::abort) [[unlikely]] {
      detail::print_fatal(e.message);
      log_flight_records(e);
      abort_ranks(e);
    }
  }

  // ------------------------------------------------------------ the flight recorder
  // A backend with a recorder provides `detail::FlightRecorder*
  // flight_recorder_impl() const noexcept` (nullptr: none, or moved-from),
  // and optionally `std::vector<detail::RankRecorder>
  // reachable_recorders_impl() const`, the rings of every rank it can read
  // (Threads: the whole world); without it a log block holds this rank's.
  // A function, not a constant: the base is instantiated while Backend is
  // still incomplete, its member function bodies only once it is complete.
  static constexpr bool has_recorder() noexcept {
    return requires(const Backend& b) {
      { b.flight_recorder_impl() } -> std::same_as<detail::FlightRecorder*>;
    };
  }

  // The flight recorder around each call into the backend: open_record(c)
  // before it (a statement of its own, so that it runs first), then
  // close_record(open, <the backend's result>), which passes the result
  // through returning(). Templates on the result type only, not on the call
  // site, so the recorder adds no per-(dtype, op) code. A timeout writes the
  // rings to the log sink (an abort does in on_failure). An exception out of
  // the backend (no shipped backend throws) ends the record as failed (the
  // guard's destructor).
  detail::RecordGuard open_record(const detail::CallDesc& c) noexcept {
    if constexpr (has_recorder()) {
      if (detail::FlightRecorder* fr = self().flight_recorder_impl(); fr != nullptr) [[likely]] {
        return detail::RecordGuard(fr, fr->begin(c), c.call);
      }
    }
    return detail::RecordGuard(nullptr, 0, c.call);
  }

  template <class R>
  R close_record(detail::RecordGuard& open, R r) {
    if (detail::FlightRecorder* fr = std::exchange(open.recorder, nullptr); fr != nullptr) [[likely]] {
      fr->end(open.ticket, r ? nullptr : &r.error());
      if (!r && r.error().code == Errc::timeout) [[unlikely]] timed_out(*fr, open.ticket, open.call, r.error());
    }
    return returning(std::move(r));
  }

  // A recorded call timed out: its block, unless on_error aborts (which
  // writes it) or it repeats the last one (FlightRecorder::claim_block).
  // Cold, and defined out of the class (below) like the seed surface, so that
  // `extern template class Communicator<B>` keeps it out of user TUs.
  [[gnu::cold]] void timed_out(const detail::FlightRecorder& fr, std::uint64_t k, detail::Call c,
                               const Error& e) const noexcept;

  // Writes the reachable rings to the log sink, with `cause` as the block's
  // first line. Defined out of the class, as timed_out.
  [[gnu::cold]] void log_flight_records(const Error& cause) const noexcept;

  // What the backend returned, after on_error had its say.
  template <class R>
  R returning(R r) const noexcept(std::is_nothrow_move_constructible_v<R>) {
    if (!r) [[unlikely]] on_failure(r.error());
    return r;
  }

  // A front-end check's failure: error(), after on_error had its say.
  [[gnu::cold]] tl::unexpected<Error> reject(Errc code, const detail::CallDesc& c, std::string_view what) const {
    Error e = error(code, c, what);
    on_failure(e);
    return tl::unexpected<Error>(std::move(e));
  }

  template <class T>
  static constexpr void check_movable() {
    detail::check_element_type<T>();
    static_assert(supports_dtype_v<Backend, dtype_of_v<T>>,
                  "polycoll::Communicator: the backend cannot move this element type");
  }

  Status check_rank(const detail::CallDesc& c, std::size_t r, const char* what) const {
    const std::size_t w = world_size();
    if (r == any_source) [[unlikely]] {
      return reject(Errc::invalid_argument, c,
                    detail::cat(what, " is any_source, which only recv and probe accept"));
    }
    if (r >= w) {
      return reject(Errc::invalid_argument, c, detail::cat(what, ' ', r, " out of range [0, ", w, ')'));
    }
    return {};
  }

  // `count * blocks` elements at `address`: not null unless empty, and the byte
  // size representable. The check is a few compares inlined into every call;
  // the message is built out of line, only on failure.
  [[gnu::always_inline]] Status check_buffer(const detail::CallDesc& c, std::uint64_t address, std::size_t count,
                                             DType dtype, std::size_t blocks, const char* what) const {
    const std::size_t elem = is_known(dtype) ? size_of(dtype) : 1;
    std::size_t elements = 0, bytes = 0;
    const bool overflow = __builtin_mul_overflow(count, blocks == 0 ? 1 : blocks, &elements) ||
                          __builtin_mul_overflow(elements, elem, &bytes);
    if (overflow || (address == 0 && count != 0)) [[unlikely]] {
      return buffer_error(c, overflow, count, elem, blocks, what);
    }
    return {};
  }

  [[gnu::cold, gnu::noinline]] Status buffer_error(const detail::CallDesc& c, bool overflow, std::size_t count,
                                                   std::size_t elem, std::size_t blocks, const char* what) const {
    if (overflow) {
      return reject(Errc::invalid_argument, c,
                    detail::cat(what, " size overflows: count ", count, " x ",
                                std::max<std::size_t>(blocks, 1), " x ", elem, " bytes"));
    }
    return reject(Errc::invalid_argument, c, detail::cat(what, " is null with count > 0"));
  }

  // Send and recv element types of typed call C agree, and recv is writable.
  // C is a template argument so that the diagnostic names the call: a
  // static_assert's message must be a literal, but g++ and clang print the
  // instantiation (check_pair<polycoll::detail::Call::reduce, ...>) with it.
  template <detail::Call C, class TS, class TR>
  static constexpr void check_pair() {
    static_assert(std::is_same_v<TS, std::remove_const_t<TR>>,
                  "polycoll::Communicator: send and recv element types differ");
    static_assert(!std::is_const_v<TR>, "polycoll::Communicator: recv is written; pass a mutable span");
    detail::check_element_type<std::remove_const_t<TR>>();
  }

  Status check_extent(const detail::CallDesc& c, std::size_t have, std::size_t need, const char* what) const {
    if (have < need) [[unlikely]] {
      return reject(Errc::invalid_argument, c,
                    detail::cat(what, ".size() is ", have, ", the counts and displacements need ",
                                need));
    }
    return {};
  }

  // `big` must be `small` x blocks (world_size by default).
  Status check_span_sizes(const detail::CallDesc& c, std::size_t big, std::size_t small, const char* big_name,
                          const char* small_name, std::size_t blocks = 0) const {
    const std::size_t w = blocks != 0 ? blocks : std::max<std::size_t>(world_size(), 1);
    if (small > std::numeric_limits<std::size_t>::max() / w || big != small * w) {
      return reject(Errc::invalid_argument, c,
                    detail::cat(big_name, " is ", big, ", expected ", small_name,
                                " x world_size = ", small, " x ", w));
    }
    return {};
  }

  // A rooted call: `local` (count elements) on every rank, `at_root` (count x
  // blocks) on the root only. They may coincide only in the in-place form:
  // local is the root's own block of at_root (block 0 when blocks is 1).
  Status check_rooted(const detail::CallDesc& c, std::uint64_t local, std::uint64_t at_root, std::size_t count,
                      std::size_t blocks, std::size_t root, const char* local_name, const char* root_name) const {
    if (auto s = check_rank(c, root, "root"); !s) return s;
    if (auto s = check_buffer(c, local, count, c.dtype, 1, local_name); !s) return s;
    if (rank() != root) return {};
    if (auto s = check_buffer(c, at_root, count, c.dtype, blocks, root_name); !s) return s;
    return check_in_block(c, local, at_root, count, blocks, blocks == 1 ? 0 : root, local_name, root_name);
  }

  // The aliasing rule of every two-buffer collective, in one place for every
  // backend: `part` (count elements) and `whole` (count x blocks elements) are
  // either disjoint or `part` is exactly block `own` of `whole` (the in-place
  // form); any other overlap is Errc::invalid_argument. A backend reads its
  // peers' blocks of `whole` while it writes `part`, so a partial overlap
  // would corrupt data silently, and differently on each backend.
  // Both sizes were checked by check_buffer, so the products cannot overflow.
  [[gnu::always_inline]] Status check_in_block(const detail::CallDesc& c, std::uint64_t part, std::uint64_t whole,
                                               std::size_t count, std::size_t blocks, std::size_t own,
                                               const char* part_name, const char* whole_name) const {
    const std::size_t elem = is_known(c.dtype) ? size_of(c.dtype) : 1;
    if (count == 0 || part == whole + own * count * elem) return {};
    return check_disjoint(c, part, count * elem, whole, count * blocks * elem, part_name, whole_name);
  }

  // Two byte ranges the call reads and writes must not overlap (apart from the
  // in-place forms the callers allow before asking).
  [[gnu::always_inline]] Status check_disjoint(const detail::CallDesc& c, std::uint64_t a, std::size_t a_bytes,
                                               std::uint64_t b, std::size_t b_bytes, const char* a_name = "send buffer",
                                               const char* b_name = "recv buffer") const {
    if (a_bytes != 0 && b_bytes != 0 && a < b + b_bytes && b < a + a_bytes) [[unlikely]] {
      return overlap_error(c, a_name, b_name);
    }
    return {};
  }

  [[gnu::cold, gnu::noinline]] Status overlap_error(const detail::CallDesc& c, const char* a_name,
                                                    const char* b_name) const {
    return reject(Errc::invalid_argument, c,
                  detail::cat(a_name, " and ", b_name,
                              " overlap (other than in the documented in-place form)"));
  }

  // The counts and displacements of a v-collective; `extent` gets the
  // elements the buffer must hold.
  Status check_v(const detail::CallDesc& c, std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                 const char* counts_name, const char* displs_name, std::size_t& extent) const {
    std::size_t bad = 0;
    if (const char* why = detail::check_layout(counts, displs, world_size(), extent, bad)) [[unlikely]] {
      return reject(Errc::invalid_argument, c,
                    detail::cat(counts_name, " (", counts.size(), ") / ", displs_name, " (",
                                displs.size(), ") ", why, " (world_size ", world_size(),
                                ", at rank ", bad, ')'));
    }
    return {};
  }

  // ------------------------------------------------------------ checks shared by both surfaces
  // check_<call> holds every run-time check of one call on its seed
  // arguments. The seed call and the typed call both run it, so the two
  // surfaces return the same errors with the same messages.

  Status check_all_reduce(const detail::CallDesc& c, std::uint64_t ptr, std::size_t count, DType dtype) const {
    return check_buffer(c, ptr, count, dtype, 1, "buffer");
  }

  // Out of place: both buffers, and send == recv (in place) or disjoint.
  Status check_all_reduce(const detail::CallDesc& c, std::uint64_t send, std::uint64_t recv, std::size_t count,
                          DType dtype) const {
    if (auto s = check_buffer(c, send, count, dtype, 1, "send buffer"); !s) return s;
    if (auto s = check_buffer(c, recv, count, dtype, 1, "recv buffer"); !s) return s;
    return check_in_block(c, send, recv, count, 1, 0, "send buffer", "recv buffer");
  }

  Status check_broadcast(const detail::CallDesc& c, std::uint64_t ptr, std::size_t count, DType dtype,
                         std::size_t root) const {
    if (auto s = check_rank(c, root, "root"); !s) return s;
    return check_buffer(c, ptr, count, dtype, 1, "buffer");
  }

  Status check_all_gather(const detail::CallDesc& c, std::uint64_t send, std::uint64_t recv, std::size_t count,
                          DType dtype) const {
    if (auto s = check_buffer(c, send, count, dtype, 1, "send buffer"); !s) return s;
    if (auto s = check_buffer(c, recv, count, dtype, world_size(), "recv buffer"); !s) return s;
    return check_in_block(c, send, recv, count, world_size(), rank(), "send buffer", "recv buffer");
  }

  Status check_reduce_scatter(const detail::CallDesc& c, std::uint64_t send, std::uint64_t recv, std::size_t count,
                              DType dtype) const {
    if (auto s = check_buffer(c, send, count, dtype, world_size(), "send buffer"); !s) return s;
    if (auto s = check_buffer(c, recv, count, dtype, 1, "recv buffer"); !s) return s;
    return check_in_block(c, recv, send, count, world_size(), rank(), "recv buffer", "send buffer");
  }

  // send and recv: the peer (`dest` or `src`) and the buffer.
  Status check_p2p(const detail::CallDesc& c, std::uint64_t ptr, std::size_t count, DType dtype, std::size_t peer,
                   const char* peer_name) const {
    if (c.call == detail::Call::recv) {
      if (auto s = check_source(c, peer, c.tag); !s) return s;
    } else {
      if (auto s = check_send_tag(c, c.tag); !s) return s;
      if (auto s = check_rank(c, peer, peer_name); !s) return s;
    }
    return check_buffer(c, ptr, count, dtype, 1, "buffer");
  }

  // recv and probe: `src` is a rank or any_source, `tag` any value (any_tag
  // matches every tag); the wildcards need supports_probe.
  Status check_source(const detail::CallDesc& c, std::size_t src, std::uint32_t tag) const {
    if (src == any_source || tag == any_tag) [[unlikely]] {
      if constexpr (!supports_probe_v<Backend>) {
        return reject(Errc::unsupported, c,
                      detail::cat(src == any_source ? "any_source" : "any_tag",
                                  " needs a backend with probe and wildcard receives (supports_probe "
                                  "is false here: the backend matches by position)"));
      }
      if (src == any_source) return {};
    }
    return check_rank(c, src, "src");
  }

  // A send (and send_recv) names one tag: any_tag is a receive's wildcard.
  Status check_send_tag(const detail::CallDesc& c, std::uint32_t tag) const {
    if (tag == any_tag) [[unlikely]] {
      return reject(Errc::invalid_argument, c,
                    "tag is any_tag (0xFFFFFFFF), a wildcard only recv and probe accept; a send "
                    "needs one tag");
    }
    return {};
  }

  static detail::CallDesc reduce_desc(std::size_t count, DType dtype, ReduceOp op, std::size_t root) noexcept {
    auto c = detail::CallDesc::reduction(detail::Call::reduce, count, dtype, op);
    c.root = root;
    return c;
  }

  Status check_reduce(const detail::CallDesc& c, std::uint64_t send, std::uint64_t recv, std::size_t count,
                      std::size_t root) const {
    return check_rooted(c, send, recv, count, 1, root, "send buffer", "recv buffer");
  }

  Status check_gather(const detail::CallDesc& c, std::uint64_t send, std::uint64_t recv, std::size_t count,
                      std::size_t root) const {
    return check_rooted(c, send, recv, count, world_size(), root, "send buffer", "recv buffer");
  }

  Status check_scatter(const detail::CallDesc& c, std::uint64_t send, std::uint64_t recv, std::size_t count,
                       std::size_t root) const {
    return check_rooted(c, recv, send, count, world_size(), root, "recv buffer", "send buffer");
  }

  Status check_all_to_all(const detail::CallDesc& c, std::uint64_t send, std::uint64_t recv, std::size_t count,
                          DType dtype) const {
    if (auto s = check_buffer(c, send, count, dtype, world_size(), "send buffer"); !s) return s;
    if (auto s = check_buffer(c, recv, count, dtype, world_size(), "recv buffer"); !s) return s;
    const std::size_t bytes = count * world_size() * (is_known(dtype) ? size_of(dtype) : 1);
    return check_disjoint(c, send, bytes, recv, bytes);
  }

  // all_gather_v names the call by the total it gathers once the counts are one per rank.
  detail::CallDesc all_gather_v_desc(std::size_t send_count, std::span<const std::size_t> recv_counts,
                                     DType dtype) const {
    auto c = detail::CallDesc::movement(detail::Call::all_gather_v, send_count, dtype);
    if (recv_counts.size() == world_size()) {
      c.count = 0;
      for (std::size_t n : recv_counts) c.count += n;
    }
    return c;
  }

  detail::VLayout layout_of(std::span<const std::size_t> counts, std::span<const std::size_t> displs) const {
    return detail::VLayout{counts.data(), displs.empty() ? nullptr : displs.data(), world_size()};
  }

  Status check_all_gather_v(const detail::CallDesc& c, std::uint64_t send, std::size_t send_count, std::uint64_t recv,
                            std::span<const std::size_t> recv_counts, std::span<const std::size_t> displs,
                            DType dtype) const {
    std::size_t extent = 0;
    if (auto s = check_v(c, recv_counts, displs, "recv_counts", "displs", extent); !s) return s;
    if (recv_counts[rank()] != send_count) {
      return reject(Errc::invalid_argument, c,
                    detail::cat("send_count ", send_count, " differs from recv_counts[", rank(),
                                "] = ", recv_counts[rank()]));
    }
    if (auto s = check_buffer(c, send, send_count, dtype, 1, "send buffer"); !s) return s;
    if (auto s = check_buffer(c, recv, extent, dtype, 1, "recv buffer"); !s) return s;
    const std::size_t elem = is_known(dtype) ? size_of(dtype) : 1;
    if (send != recv + layout_of(recv_counts, displs).displ(rank()) * elem) {
      return check_disjoint(c, send, send_count * elem, recv, extent * elem);
    }
    return {};
  }

  Status check_all_to_all_v(const detail::CallDesc& c, std::uint64_t send, std::span<const std::size_t> send_counts,
                            std::span<const std::size_t> send_displs, std::uint64_t recv,
                            std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
                            DType dtype) const {
    std::size_t send_extent = 0, recv_extent = 0;
    if (auto s = check_v(c, send_counts, send_displs, "send_counts", "send_displs", send_extent); !s) return s;
    if (auto s = check_v(c, recv_counts, recv_displs, "recv_counts", "recv_displs", recv_extent); !s) return s;
    if (auto s = check_buffer(c, send, send_extent, dtype, 1, "send buffer"); !s) return s;
    if (auto s = check_buffer(c, recv, recv_extent, dtype, 1, "recv buffer"); !s) return s;
    const std::size_t elem = is_known(dtype) ? size_of(dtype) : 1;
    return check_disjoint(c, send, send_extent * elem, recv, recv_extent * elem);
  }

  Status check_send_recv(const detail::CallDesc& c, std::uint64_t send, std::size_t send_count, std::size_t dest,
                         std::uint64_t recv, std::size_t recv_count, std::size_t src, DType dtype) const {
    if (auto s = check_send_tag(c, c.tag); !s) return s;
    if (auto s = check_rank(c, dest, "dest"); !s) return s;
    if (auto s = check_rank(c, src, "src"); !s) return s;
    if (auto s = check_buffer(c, send, send_count, dtype, 1, "send buffer"); !s) return s;
    if (auto s = check_buffer(c, recv, recv_count, dtype, 1, "recv buffer"); !s) return s;
    const std::size_t elem = is_known(dtype) ? size_of(dtype) : 1;
    return check_disjoint(c, send, send_count * elem, recv, recv_count * elem);
  }

  // The typed out-of-place all_reduce's span check, then the seed call's;
  // then `to_backend(c, send, recv, count)`.
  template <class T, class F>
  Status all_reduce_typed(std::span<const T> s, std::span<T> r, ReduceOp op, F&& to_backend) {
    constexpr DType D = dtype_of_v<T>;
    const auto c = detail::CallDesc::reduction(detail::Call::all_reduce, s.size(), D, op);
    if (r.size() != s.size()) {
      return reject(Errc::invalid_argument, c,
                    detail::cat("recv.size() ", r.size(), " differs from send.size() ", s.size()));
    }
    const std::uint64_t sa = detail::to_address(s.data()), ra = detail::to_address(r.data());
    if (auto st = check_all_reduce(c, sa, ra, s.size(), D); !st) return st;
    return to_backend(c, sa, ra, s.size());
  }

  // The typed reduce_scatter's span checks, then the seed call's; then
  // `to_backend(c, send, recv, count)`.
  template <class T, class F>
  Status reduce_scatter_typed(std::span<const T> s, std::span<T> r, ReduceOp op, F&& to_backend) {
    constexpr DType D = dtype_of_v<T>;
    const auto c = detail::CallDesc::reduction(detail::Call::reduce_scatter, r.size(), D, op);
    if (auto st = check_span_sizes(c, s.size(), r.size(), "send.size()", "recv.size()"); !st) return st;
    const std::uint64_t sa = detail::to_address(s.data()), ra = detail::to_address(r.data());
    if (auto st = check_reduce_scatter(c, sa, ra, r.size(), D); !st) return st;
    return to_backend(c, sa, ra, r.size());
  }

  // The typed reduce's span check (on the root), then the seed call's; then
  // `to_backend(c, send, recv, count, root)`.
  template <class T, class F>
  Status reduce_typed(std::span<const T> s, std::span<T> r, ReduceOp op, std::size_t root, F&& to_backend) {
    const auto c = reduce_desc(s.size(), dtype_of_v<T>, op, root);
    if (rank() == root) {
      if (auto st = check_span_sizes(c, r.size(), s.size(), "recv.size()", "send.size()", 1); !st) return st;
    }
    const std::uint64_t sa = detail::to_address(s.data()), ra = detail::to_address(r.data());
    if (auto st = check_reduce(c, sa, ra, s.size(), root); !st) return st;
    return to_backend(c, sa, ra, s.size(), root);
  }

  // ------------------------------------------------------------ the calls into the backend
  // <call>_tagged is the one place each call reaches the backend, with the
  // tags both surfaces arrive at. A backend written against the seed surface
  // alone lacks the newer *_impl: those calls are Errc::unsupported on it.

  template <DType D, ReduceOp Op>
  Status all_reduce_tagged(dtype_tag<D> d, op_tag<Op> o, std::uint64_t ptr, std::size_t count) {
    using T = typename dtype_tag<D>::type;
    detail::RecordGuard open = open_record(detail::CallDesc::reduction(detail::Call::all_reduce, count, D, Op));
    return close_record(open, self().all_reduce_impl(d, o, detail::to_ptr<T>(ptr), count));
  }

  // Out of place: a backend with its own out-of-place all_reduce_impl (Mpi,
  // Nccl, AnyCommunicator) gets both buffers; on one without, recv takes a
  // copy of send and the in-place call follows. That fallback is for backends
  // on host memory whose all_reduce completes before it returns (NoOp,
  // Threads): the copy reads send now, not in the order of posted work.
  template <DType D, ReduceOp Op>
  Status all_reduce_tagged(dtype_tag<D> d, op_tag<Op> o, std::uint64_t send, std::uint64_t recv,
                           std::size_t count) {
    using T = typename dtype_tag<D>::type;
    if (send == recv) return all_reduce_tagged(d, o, recv, count);
    const T* s = detail::to_ptr<const T>(send);
    T* r = detail::to_ptr<T>(recv);
    if constexpr (requires { self().all_reduce_impl(d, o, s, r, count); }) {
      detail::RecordGuard open = open_record(detail::CallDesc::reduction(detail::Call::all_reduce, count, D, Op));
      return close_record(open, self().all_reduce_impl(d, o, s, r, count));
    } else {
      // memmove: the front end allows no partial overlap, but the compiler
      // cannot know that (-Wrestrict on a constant bad call).
      if (count != 0) std::memmove(static_cast<void*>(r), static_cast<const void*>(s), count * sizeof(T));
      return all_reduce_tagged(d, o, recv, count);
    }
  }

  // The value form: a backend with its own all_reduce_value_impl (Nccl: the
  // value is not device memory; Mpi: the operation may stay posted after a
  // timeout, so the value travels in a cell that outlives the call) returns
  // complete from it. Elsewhere the value is a one-element in-place
  // all_reduce; a backend whose collectives return complete
  // (collectives_complete_on_return: NoOp, Threads) needs nothing more, so
  // the call leaves earlier point-to-point work alone, as MPI_Allreduce does;
  // any other backend is synced, the portable way to complete a collective.
  template <DType D, ReduceOp Op>
  Status all_reduce_value_tagged(dtype_tag<D> d, op_tag<Op> o, std::uint64_t value) {
    using T = typename dtype_tag<D>::type;
    if constexpr (requires { self().all_reduce_value_impl(d, o, detail::to_ptr<T>(value)); }) {
      detail::RecordGuard open = open_record(detail::CallDesc::reduction(detail::Call::all_reduce, 1, D, Op));
      return close_record(open, self().all_reduce_value_impl(d, o, detail::to_ptr<T>(value)));
    } else if constexpr (requires { requires Backend::collectives_complete_on_return; }) {
      return all_reduce_tagged(d, o, value, 1);
    } else {
      if (auto s = all_reduce_tagged(d, o, value, 1); !s) return s;
      return sync();
    }
  }

  template <DType D>
  Status broadcast_tagged(dtype_tag<D> d, std::uint64_t ptr, std::size_t count, std::size_t root) {
    using T = typename dtype_tag<D>::type;
    detail::RecordGuard open = open_record(detail::CallDesc::rooted(detail::Call::broadcast, count, D, root));
    return close_record(open, self().broadcast_impl(d, detail::to_ptr<T>(ptr), count, root));
  }

  template <DType D>
  Status all_gather_tagged(dtype_tag<D> d, std::uint64_t send, std::uint64_t recv, std::size_t count) {
    using T = typename dtype_tag<D>::type;
    detail::RecordGuard open = open_record(detail::CallDesc::movement(detail::Call::all_gather, count, D));
    return close_record(open,
                        self().all_gather_impl(d, detail::to_ptr<const T>(send), detail::to_ptr<T>(recv), count));
  }

  template <DType D, ReduceOp Op>
  Status reduce_scatter_tagged(dtype_tag<D> d, op_tag<Op> o, std::uint64_t send, std::uint64_t recv,
                               std::size_t count) {
    using T = typename dtype_tag<D>::type;
    detail::RecordGuard open = open_record(detail::CallDesc::reduction(detail::Call::reduce_scatter, count, D, Op));
    const T* s = detail::to_ptr<const T>(send);
    return close_record(open, self().reduce_scatter_impl(d, o, s, detail::to_ptr<T>(recv), count));
  }

  template <DType D>
  Status send_tagged(dtype_tag<D> d, std::uint64_t ptr, std::size_t count, std::size_t dest, std::uint32_t tag) {
    using T = typename dtype_tag<D>::type;
    detail::RecordGuard open = open_record(detail::CallDesc::p2p(detail::Call::send, count, D, dest, tag));
    return close_record(open, self().send_impl(d, detail::to_ptr<const T>(ptr), count, dest, tag));
  }

  template <DType D>
  Status recv_tagged(dtype_tag<D> d, std::uint64_t ptr, std::size_t count, std::size_t src, std::uint32_t tag) {
    using T = typename dtype_tag<D>::type;
    detail::RecordGuard open = open_record(detail::CallDesc::p2p(detail::Call::recv, count, D, src, tag));
    return close_record(open, self().recv_impl(d, detail::to_ptr<T>(ptr), count, src, tag));
  }

  template <DType D, ReduceOp Op>
  Status reduce_tagged(const detail::CallDesc& c, dtype_tag<D> d, op_tag<Op> o, std::uint64_t send,
                       std::uint64_t recv, std::size_t count, std::size_t root) {
    using T = typename dtype_tag<D>::type;
    const T* s = detail::to_ptr<const T>(send);
    T* r = rank() == root ? detail::to_ptr<T>(recv) : nullptr;
    if constexpr (requires { self().reduce_impl(d, o, s, r, count, root); }) {
      detail::RecordGuard open = open_record(c);
      return close_record(open, self().reduce_impl(d, o, s, r, count, root));
    } else {
      return not_implemented(c);
    }
  }

  template <DType D>
  Status gather_tagged(const detail::CallDesc& c, dtype_tag<D> d, std::uint64_t send, std::uint64_t recv,
                       std::size_t count, std::size_t root) {
    using T = typename dtype_tag<D>::type;
    const T* s = detail::to_ptr<const T>(send);
    T* r = rank() == root ? detail::to_ptr<T>(recv) : nullptr;
    if constexpr (requires { self().gather_impl(d, s, r, count, root); }) {
      detail::RecordGuard open = open_record(c);
      return close_record(open, self().gather_impl(d, s, r, count, root));
    } else {
      return not_implemented(c);
    }
  }

  template <DType D>
  Status scatter_tagged(const detail::CallDesc& c, dtype_tag<D> d, std::uint64_t send, std::uint64_t recv,
                        std::size_t count, std::size_t root) {
    using T = typename dtype_tag<D>::type;
    const T* s = rank() == root ? detail::to_ptr<const T>(send) : nullptr;
    T* r = detail::to_ptr<T>(recv);
    if constexpr (requires { self().scatter_impl(d, s, r, count, root); }) {
      detail::RecordGuard open = open_record(c);
      return close_record(open, self().scatter_impl(d, s, r, count, root));
    } else {
      return not_implemented(c);
    }
  }

  template <DType D>
  Status all_to_all_tagged(const detail::CallDesc& c, dtype_tag<D> d, std::uint64_t send, std::uint64_t recv,
                           std::size_t count) {
    using T = typename dtype_tag<D>::type;
    const T* s = detail::to_ptr<const T>(send);
    T* r = detail::to_ptr<T>(recv);
    if constexpr (requires { self().all_to_all_impl(d, s, r, count); }) {
      detail::RecordGuard open = open_record(c);
      return close_record(open, self().all_to_all_impl(d, s, r, count));
    } else {
      return not_implemented(c);
    }
  }

  template <DType D>
  Status all_gather_v_tagged(const detail::CallDesc& c, dtype_tag<D> d, std::uint64_t send, std::size_t send_count,
                             std::uint64_t recv, const detail::VLayout& layout) {
    using T = typename dtype_tag<D>::type;
    const T* s = detail::to_ptr<const T>(send);
    T* r = detail::to_ptr<T>(recv);
    if constexpr (requires { self().all_gather_v_impl(d, s, send_count, r, layout); }) {
      detail::RecordGuard open = open_record(c);
      return close_record(open, self().all_gather_v_impl(d, s, send_count, r, layout));
    } else {
      return not_implemented(c);
    }
  }

  template <DType D>
  Status all_to_all_v_tagged(const detail::CallDesc& c, dtype_tag<D> d, std::uint64_t send,
                             const detail::VLayout& sl, std::uint64_t recv, const detail::VLayout& rl) {
    using T = typename dtype_tag<D>::type;
    const T* s = detail::to_ptr<const T>(send);
    T* r = detail::to_ptr<T>(recv);
    if constexpr (requires { self().all_to_all_v_impl(d, s, sl, r, rl); }) {
      detail::RecordGuard open = open_record(c);
      return close_record(open, self().all_to_all_v_impl(d, s, sl, r, rl));
    } else {
      return not_implemented(c);
    }
  }

  // A backend written against the seed surface alone: the newer calls are
  // Errc::unsupported on it (AnyCommunicator still holds it).
  Status not_implemented(const detail::CallDesc& c) const {
    return reject(Errc::unsupported, c, "the backend does not implement this call");
  }

  tl::unexpected<Error> unknown_dtype(const detail::CallDesc& c) const {
    return reject(Errc::invalid_argument, c, detail::cat("unknown DType value ", detail::dtype_text(c.dtype)));
  }

  // Run-time DType -> tag, then the capability trait, then `f(tag)`.
  template <class F>
  Status dispatch_movement(const detail::CallDesc& c, F&& f) {
    return visit_dtype(
        c.dtype,
        [&](auto d) -> Status {
          if constexpr (supports_dtype_v<Backend, decltype(d)::value>) {
            return f(d);
          } else {
            return reject(Errc::unsupported, c, "the backend cannot move this dtype");
          }
        },
        [&]() -> Status { return unknown_dtype(c); });
  }

  // Run-time ReduceOp -> tag for the one dtype D, then validity, then the
  // capability trait, then `f(o)`. A typed call with a run-time op comes here
  // directly: it instantiates the backend for D's ops and no other dtype.
  template <DType D, class F>
  Status dispatch_op(const detail::CallDesc& c, F&& f) {
    return visit_op(
        c.op,
        [&](auto o) -> Status {
          constexpr ReduceOp Op = decltype(o)::value;
          if constexpr (!is_valid_v<D, Op>) {
            return reject(Errc::invalid_argument, c,
                          detail::cat("op ", name(Op), " is not defined for dtype ", name(D)));
          } else if constexpr (!supports_reduction_v<Backend, D, Op>) {
            return reject(Errc::unsupported, c, "the backend does not support this (dtype, op)");
          } else {
            return f(o);
          }
        },
        [&]() -> Status {
          return reject(Errc::invalid_argument, c, detail::cat("unknown ReduceOp value ", detail::op_text(c.op)));
        });
  }

  // Run-time (DType, ReduceOp) -> tags (the seed surface), then as dispatch_op, then `f(d, o)`.
  template <class F>
  Status dispatch_reduction(const detail::CallDesc& c, F&& f) {
    return visit_dtype(
        c.dtype,
        [&](auto d) -> Status { return dispatch_op<decltype(d)::value>(c, [&](auto o) { return f(d, o); }); },
        [&]() -> Status { return unknown_dtype(c); });
  }
};

// The flight recorder's cold paths (see the declarations), out of the class
// for the same reason as the seed surface below.
template <class Backend>
void Communicator<Backend>::timed_out(const detail::FlightRecorder& fr, std::uint64_t k, detail::Call c,
                                      const Error& e) const noexcept {
  if (on_error_setting() == OnError::abort) return;
  try {
    if (fr.claim_block(k, c)) log_flight_records(e);
  } catch (...) {
    // Out of memory while deciding: the Error itself still says what happened.
  }
}

template <class Backend>
void Communicator<Backend>::log_flight_records(const Error& cause) const noexcept {
  if constexpr (has_recorder()) {
    try {
      std::vector<detail::RankRecorder> rings;
      if constexpr (requires(const Backend& b) { b.reachable_recorders_impl(); }) {
        rings = self().reachable_recorders_impl();
      } else if (const detail::FlightRecorder* fr = self().flight_recorder_impl()) {
        rings.push_back({rank(), fr});
      }
      if (!rings.empty()) detail::log_flight_records(cause.message, rings, world_size(), name_of_backend());
    } catch (...) {
      // Out of memory while reporting: the Error itself still says what happened.
    }
  } else {
    (void)cause;
  }
}

// The seed surface, defined outside the class: these members are not inline,
// so an explicit instantiation declaration (`extern template class
// Communicator<B>`, see the shipped backends' headers) keeps a TU from
// instantiating their dispatch over every (dtype, op) pair; libpolycoll holds
// them once. With POLYCOLL_HEADER_ONLY, or for any other backend, they are
// instantiated where used, like every other template.

template <class Backend>
Status Communicator<Backend>::all_reduce(std::uint64_t ptr, std::size_t count, DType dtype, ReduceOp op) {
  const auto c = detail::CallDesc::reduction(detail::Call::all_reduce, count, dtype, op);
  if (auto s = check_all_reduce(c, ptr, count, dtype); !s) return s;
  return dispatch_reduction(c, [&](auto d, auto o) { return all_reduce_tagged(d, o, ptr, count); });
}

template <class Backend>
Status Communicator<Backend>::all_reduce(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype,
                                         ReduceOp op) {
  const auto c = detail::CallDesc::reduction(detail::Call::all_reduce, count, dtype, op);
  if (auto s = check_all_reduce(c, send, recv, count, dtype); !s) return s;
  return dispatch_reduction(c, [&](auto d, auto o) { return all_reduce_tagged(d, o, send, recv, count); });
}

template <class Backend>
Status Communicator<Backend>::all_reduce_value(std::uint64_t value, DType dtype, ReduceOp op) {
  const auto c = detail::CallDesc::reduction(detail::Call::all_reduce, 1, dtype, op);
  if (auto s = check_all_reduce(c, value, 1, dtype); !s) return s;
  return dispatch_reduction(c, [&](auto d, auto o) { return all_reduce_value_tagged(d, o, value); });
}

template <class Backend>
Status Communicator<Backend>::broadcast(std::uint64_t ptr, std::size_t count, DType dtype, std::size_t root) {
  const auto c = detail::CallDesc::rooted(detail::Call::broadcast, count, dtype, root);
  if (auto s = check_broadcast(c, ptr, count, dtype, root); !s) return s;
  return dispatch_movement(c, [&](auto d) { return broadcast_tagged(d, ptr, count, root); });
}

template <class Backend>
Status Communicator<Backend>::all_gather(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype) {
  const auto c = detail::CallDesc::movement(detail::Call::all_gather, count, dtype);
  if (auto s = check_all_gather(c, send, recv, count, dtype); !s) return s;
  return dispatch_movement(c, [&](auto d) { return all_gather_tagged(d, send, recv, count); });
}

template <class Backend>
Status Communicator<Backend>::reduce_scatter(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype, ReduceOp op) {
  const auto c = detail::CallDesc::reduction(detail::Call::reduce_scatter, count, dtype, op);
  if (auto s = check_reduce_scatter(c, send, recv, count, dtype); !s) return s;
  return dispatch_reduction(c, [&](auto d, auto o) { return reduce_scatter_tagged(d, o, send, recv, count); });
}

template <class Backend>
Status Communicator<Backend>::send(std::uint64_t ptr, std::size_t count, DType dtype, std::size_t dest, std::uint32_t tag) {
  const auto c = detail::CallDesc::p2p(detail::Call::send, count, dtype, dest, tag);
  if (auto s = check_p2p(c, ptr, count, dtype, dest, "dest"); !s) return s;
  return dispatch_movement(c, [&](auto d) { return send_tagged(d, ptr, count, dest, tag); });
}

template <class Backend>
Status Communicator<Backend>::recv(std::uint64_t ptr, std::size_t count, DType dtype, std::size_t src, std::uint32_t tag) {
  const auto c = detail::CallDesc::p2p(detail::Call::recv, count, dtype, src, tag);
  if (auto s = check_p2p(c, ptr, count, dtype, src, "src"); !s) return s;
  return dispatch_movement(c, [&](auto d) { return recv_tagged(d, ptr, count, src, tag); });
}

template <class Backend>
Result<std::optional<MessageInfo>> Communicator<Backend>::probe(std::size_t src, std::uint32_t tag, DType dtype) {
  const auto c = detail::CallDesc::p2p(detail::Call::probe, detail::npos, dtype, src, tag);
  if (!is_known(dtype)) return unknown_dtype(c);
  if constexpr (!supports_probe_v<Backend>) {
    return reject(Errc::unsupported, c,
                  "the backend has no probe (supports_probe is false: it matches sends and receives "
                  "by position, with no message envelope to inspect)");
  } else {
    if (auto s = check_source(c, src, tag); !s) return tl::unexpected(std::move(s.error()));
    Result<std::optional<detail::Envelope>> found = returning(self().probe_impl(src, tag));
    if (!found) return tl::unexpected(std::move(found.error()));
    if (!found->has_value()) return std::optional<MessageInfo>{};
    const detail::Envelope& e = **found;
    const std::size_t elem = size_of(dtype);
    if (e.bytes % elem != 0) {
      return reject(Errc::mismatch, c,
                    detail::cat("the message from rank ", e.source, " with tag ", e.tag, " has ",
                                e.bytes, " bytes, not a whole number of ", detail::dtype_text(dtype),
                                " elements (", elem, " bytes each)"));
    }
    return std::optional<MessageInfo>{MessageInfo{e.source, e.tag, e.bytes / elem}};
  }
}

template <class Backend>
Status Communicator<Backend>::reduce(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype, ReduceOp op, std::size_t root) {
  const auto c = reduce_desc(count, dtype, op, root);
  if (auto s = check_reduce(c, send, recv, count, root); !s) return s;
  return dispatch_reduction(c, [&](auto d, auto o) { return reduce_tagged(c, d, o, send, recv, count, root); });
}

template <class Backend>
Status Communicator<Backend>::gather(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype, std::size_t root) {
  const auto c = detail::CallDesc::rooted(detail::Call::gather, count, dtype, root);
  if (auto s = check_gather(c, send, recv, count, root); !s) return s;
  return dispatch_movement(c, [&](auto d) { return gather_tagged(c, d, send, recv, count, root); });
}

template <class Backend>
Status Communicator<Backend>::scatter(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype, std::size_t root) {
  const auto c = detail::CallDesc::rooted(detail::Call::scatter, count, dtype, root);
  if (auto s = check_scatter(c, send, recv, count, root); !s) return s;
  return dispatch_movement(c, [&](auto d) { return scatter_tagged(c, d, send, recv, count, root); });
}

template <class Backend>
Status Communicator<Backend>::all_to_all(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype) {
  const auto c = detail::CallDesc::movement(detail::Call::all_to_all, count, dtype);
  if (auto s = check_all_to_all(c, send, recv, count, dtype); !s) return s;
  return dispatch_movement(c, [&](auto d) { return all_to_all_tagged(c, d, send, recv, count); });
}

template <class Backend>
Status Communicator<Backend>::all_gather_v(std::uint64_t send, std::size_t send_count, std::uint64_t recv, std::span<const std::size_t> recv_counts, std::span<const std::size_t> displs, DType dtype) {
  const auto c = all_gather_v_desc(send_count, recv_counts, dtype);
  if (auto s = check_all_gather_v(c, send, send_count, recv, recv_counts, displs, dtype); !s) return s;
  const detail::VLayout layout = layout_of(recv_counts, displs);
  return dispatch_movement(c, [&](auto d) { return all_gather_v_tagged(c, d, send, send_count, recv, layout); });
}

template <class Backend>
Status Communicator<Backend>::all_to_all_v(std::uint64_t send, std::span<const std::size_t> send_counts, std::span<const std::size_t> send_displs, std::uint64_t recv, std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs, DType dtype) {
  const auto c = detail::CallDesc::movement(detail::Call::all_to_all_v, detail::npos, dtype);
  if (auto s = check_all_to_all_v(c, send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype); !s)
    return s;
  const detail::VLayout sl = layout_of(send_counts, send_displs);
  const detail::VLayout rl = layout_of(recv_counts, recv_displs);
  return dispatch_movement(c, [&](auto d) { return all_to_all_v_tagged(c, d, send, sl, recv, rl); });
}

template <class Backend>
Status Communicator<Backend>::send_recv(std::uint64_t send, std::size_t send_count, std::size_t dest, std::uint64_t recv, std::size_t recv_count, std::size_t src, DType dtype, std::uint32_t tag) {
  const auto c = detail::CallDesc::p2p(detail::Call::send_recv, send_count, dtype, dest, tag);
  if (auto s = check_send_recv(c, send, send_count, dest, recv, recv_count, src, dtype); !s) return s;
  if (auto s = group_start(); !s) return s;
  Status sent = this->send(send, send_count, dtype, dest, tag);
  Status received = sent ? this->recv(recv, recv_count, dtype, src, tag) : Status{};
  Status ended = group_end();
  if (!sent) return sent;
  if (!received) return received;
  return ended;
}

/// Satisfied by the backends: types deriving from `Communicator<B>` that name themselves (`B::backend_name`).
template <class B>
concept CommunicatorBackend = std::is_base_of_v<Communicator<B>, B> && requires { B::backend_name; };

}  // namespace polycoll
