#pragma once
/// @file backends/threads.hpp
/// Threads: n ranks as n threads of one process, communicating through shared
/// memory. `Threads::create(n)` returns one communicator per thread.
///
/// Collectives are blocking (complete on return). Small messages take a
/// latency path: each rank copies its contribution into a pre-touched scratch
/// slot, one barrier, then every rank reads its peers' slots. Large messages
/// are reduced in place: each rank reduces its own slice reading every peer's
/// buffer directly (reduce-scatter), a barrier, then each rank copies the other
/// slices from their owners (all-gather). On both paths every element is
/// folded in rank order 0, 1, ..., n-1, so results do not depend on the size
/// or the element's position. send/recv are matched by (src, tag)
/// in order (any_source / any_tag receives too, in MPI's order); the second
/// of a matching pair to be posted does the copy (a send of at most
/// detail::eager_bytes that waits for its receive was copied when posted),
/// and sync() waits for this rank's operations to complete. See docs/backends.md.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <polycoll/any_communicator.hpp>
#include <polycoll/backends/threads/state.hpp>
#include <polycoll/communicator.hpp>
#include <polycoll/detail/call.hpp>
#include <polycoll/detail/layout.hpp>
#include <polycoll/detail/linkage.hpp>
#include <polycoll/detail/on_error.hpp>
#include <polycoll/detail/send_check.hpp>
#include <polycoll/detail/std_parts.hpp>
#include <polycoll/detail/wait.hpp>
#include <polycoll/kernels/reduce.hpp>
#include <polycoll/log.hpp>

namespace polycoll {

class Threads;

template <DType D>
struct supports_dtype<Threads, D> : std::true_type {};
template <DType D, ReduceOp Op>
struct supports_reduction<Threads, D, Op> : std::bool_constant<is_valid_v<D, Op>> {};
/// Threads has probe and any_source / any_tag receives.
template <>
struct supports_probe<Threads> : std::true_type {};

/// In-process ranks over shared memory.
class Threads : public Communicator<Threads> {
 public:
  /// The name in error messages and AnyCommunicator::backend_name().
  static constexpr std::string_view backend_name = "threads";
  /// A collective returns complete (its outputs valid, nothing of it left
  /// pending), so all_reduce_value needs no sync() after it.
  static constexpr bool collectives_complete_on_return = true;

  /// n communicators of one world, element r for rank r; hand each to its own thread.
  /// With Options::on_error abort (or POLYCOLL_ON_ERROR=abort) a failure
  /// here ends the process too.
  [[nodiscard]] static Result<std::vector<Threads>> create(std::size_t n, Options options = {}) {
    options = detail::with_environment(options);
    return detail::factory_result(options.on_error, make(n, options));
  }

  /// Convenience: creates a world of n, runs `f(comm)` on n threads, joins
  /// them. `f` returns void or a Status. A rank fails when its `f` returns a
  /// failing Status or throws; the first rank to fail (in time) aborts the
  /// world, so that the others' blocking calls return Errc::aborted naming it
  /// instead of waiting forever for a rank that gave up, as MPI_Abort would
  /// stop them. run returns:
  /// - the first failure when it was a returned Status: its code, and
  ///   "Threads::run(n=4) [threads]: rank 2 returned: <its message>" (ranks
  ///   that threw afterwards are appended);
  /// - when the first failure was an exception: Errc::aborted naming every
  ///   rank that threw (a thread that cannot be started counts as one);
  /// - success when every rank returned success (or void).
  /// The failures that followed the first, mostly Errc::aborted caused by it,
  /// are not reported. The process is never terminated, unless
  /// Options::on_error (or POLYCOLL_ON_ERROR) is abort: then run's failure,
  /// like any call's, is printed and ends it.
  template <class F>
  [[nodiscard]] static Status run(std::size_t n, F&& f, Options options = {}) {
    using R = std::invoke_result_t<F&, Threads&>;
    static_assert(std::is_void_v<R> || std::is_same_v<std::remove_cvref_t<R>, Status>,
                  "polycoll::Threads::run: the rank function must return void or polycoll::Status");
    options = detail::with_environment(options);
    return detail::factory_result(options.on_error, run_world(n, f, options));
  }

  /// Takes over `other`'s communicator; `other` is left moved-from (its calls return Errors).
  Threads(Threads&& other) noexcept
      : Communicator<Threads>(std::move(other)), world_(std::move(other.world_)), rank_(other.rank_) {}
  /// Releases the held communicator (drop contract), then takes over `other`'s.
  Threads& operator=(Threads&& other) noexcept {
    if (this != &other) {
      release();
      world_ = std::move(other.world_);
      rank_ = other.rank_;
    }
    return *this;
  }
  Threads(const Threads&) = delete;
  Threads& operator=(const Threads&) = delete;
  ~Threads() { release(); }

  /// The options this world was created with.
  [[nodiscard]] const Options& options() const noexcept {
    static const Options none{};
    return world_ ? world_->options : none;
  }

 private:
  friend class Communicator<Threads>;
  using RankState = detail::threads::RankState;
  using World = detail::threads::World;
  using VLayout = detail::VLayout;

  Threads(std::shared_ptr<World> world, std::size_t rank) noexcept : world_(std::move(world)), rank_(rank) {}

  // create() before Options::on_error has its say.
  static Result<std::vector<Threads>> make(std::size_t n, const Options& options);

  // run() before Options::on_error has its say.
  template <class F>
  static Status run_world(std::size_t n, F& f, const Options& options) {
    auto comms = make(n, options);
    if (!comms) return tl::unexpected(std::move(comms.error()));
    // Held here too: f may move its communicator away and destroy it.
    const std::shared_ptr<World> world = (*comms)[0].world_;
    std::mutex failed_mutex;
    std::optional<Error> first;  // the first failure; Errc::aborted when it was a throw
    bool first_threw = false;
    std::string threw;  // "rank 1 threw: <what>; rank 3 threw: <what>"
    // Under the lock, so that the first failure recorded is the one whose abort
    // the other ranks see (Threads::abort keeps only the first cause).
    auto fail_rank = [&](std::size_t r, std::string&& what, const Error* returned) noexcept {
      try {
        std::string line = detail::cat("rank ", r, ' ', what);
        std::lock_guard lock(failed_mutex);
        // The ranks may wait in a communicator split from this one: abort them all.
        world->abort_tree(detail::cat("Threads::run: ", line));
        if (!first) {
          first = Error{returned ? returned->code : Errc::aborted, line, returned ? returned->native : 0};
          first_threw = returned == nullptr;
        }
        if (returned == nullptr) threw += detail::cat(threw.empty() ? "" : "; ", line);
      } catch (...) {
        world->abort_tree(std::string{});  // out of memory for the text: still stop the others
      }
    };
    std::vector<std::thread> threads;
    try {
      threads.reserve(n);
      for (std::size_t r = 0; r < n; ++r) {
        threads.emplace_back([&f, &fail_rank, &comms, r] {
          try {
            if constexpr (std::is_void_v<std::invoke_result_t<F&, Threads&>>) {
              f((*comms)[r]);
            } else if (const Status s = f((*comms)[r]); !s) {
              fail_rank(r, detail::cat("returned: ", s.error().message), &s.error());
            }
          } catch (const std::exception& e) {
            fail_rank(r, detail::cat("threw: ", e.what()), nullptr);
          } catch (...) {
            fail_rank(r, "threw an exception not derived from std::exception", nullptr);
          }
        });
      }
    } catch (const std::exception& e) {
      // Ranks without a thread never arrive: abort so the started ones return.
      fail_rank(threads.size(), detail::cat("could not be started: ", e.what()), nullptr);
    }
    for (auto& t : threads) t.join();
    if (!first) return {};
    if (first_threw) {
      return fail(Errc::aborted,
                  detail::cat("Threads::run(n=", n, ") [threads]: ", threw,
                              "; the communicator was aborted, so the other ranks' blocking calls returned "
                              "Errc::aborted"));
    }
    return fail(first->code,
                detail::cat("Threads::run(n=", n, ") [threads]: ", first->message, threw.empty() ? "" : "; then ",
                            threw),
                first->native);
  }

  std::size_t world_size_impl() const noexcept { return world_ ? world_->n : 1; }
  std::size_t rank_impl() const noexcept { return world_ ? rank_ : 0; }

  RankState& me() const noexcept { return world_->ranks[rank_]; }
  RankState& peer(std::size_t r) const noexcept { return world_->ranks[r]; }

  // The flight recorder (the front end records every call): this rank's ring,
  // and for a log block every rank's, since the world's memory is shared.
  // In libpolycoll, as every non-template member: a user TU compiles no Threads code.
  detail::FlightRecorder* flight_recorder_impl() const noexcept;
  std::vector<detail::RankRecorder> reachable_recorders_impl() const;

  // ------------------------------------------------------------ phases

  // Guard for one collective: holds this rank's submission lock and numbers the call.
  struct Collective {
    std::unique_lock<std::mutex> lock;
    detail::CallDesc call;
  };

  Result<Collective> begin(detail::CallDesc call);

  // Announces the next phase in this rank's arrival line and waits until every
  // peer has announced it. Each rank writes only its own line and reads the
  // others', so no cache line is written by two cores.
  Status phase(const detail::CallDesc& call, std::optional<detail::Clock::time_point> deadline);

  // Parity of the next phase this rank will announce: latency-path data for
  // that phase goes into line[parity] or scratch parity `parity`.
  unsigned next_parity() const noexcept { return (me().phases + 1) & 1u; }

  // Where this rank's latency-path contribution of `bytes` for the next phase goes.
  std::byte* outbox(std::size_t bytes, unsigned parity) const noexcept {
    return bytes <= world_->inline_limit() ? me().line[parity].data : world_->scratch_of(rank_, parity);
  }
  // Where peer q's contribution of `bytes` for the phase of parity `parity` is.
  const std::byte* inbox(std::size_t q, std::size_t bytes, unsigned parity) const noexcept {
    return bytes <= world_->inline_limit() ? peer(q).line[parity].data : world_->scratch_of(q, parity);
  }

  // The first phase of a call. With the consistency check on, every rank then
  // compares the fingerprints (call, count, dtype, op, root, sequence number)
  // that all ranks published in their arrival lines, so a mismatch is
  // Errc::mismatch on every rank instead of a hang or corrupted data.
  Status arrive(const detail::CallDesc& call, std::optional<detail::Clock::time_point> dl);
  // The check's verdict once the packed fingerprints differed: names each
  // rank whose call differs, from the full descriptions the ranks publish
  // in one more phase.
  [[gnu::cold]] Status mismatch(const detail::CallDesc& call, unsigned parity,
                                std::optional<detail::Clock::time_point> dl);

  std::optional<detail::Clock::time_point> deadline() const { return detail::deadline_after(world_->options.op_timeout); }

  // Large-path slice [lo, hi) of `count` elements of size `elem` owned by rank q.
  std::pair<std::size_t, std::size_t> slice(std::size_t count, std::size_t elem, std::size_t q) const noexcept {
    const std::size_t n = world_->n;
    const std::size_t unit = std::max<std::size_t>(1, detail::threads::slice_align / elem);
    const std::size_t units = (count + unit - 1) / unit;
    auto edge = [&](std::size_t r) { return std::min(count, (units * r / n) * unit); };
    return {edge(q), edge(q + 1)};
  }

  // ------------------------------------------------------------ collectives

  template <DType D, ReduceOp Op, class T>
  Status all_reduce_impl(dtype_tag<D> d, op_tag<Op> o, T* buf, std::size_t count);

  template <DType D, ReduceOp Op, class T>
  Status reduce_scatter_impl(dtype_tag<D> d, op_tag<Op> o, const T* send, T* recv, std::size_t count);

  template <DType D, class T>
  Status broadcast_impl(dtype_tag<D>, T* buf, std::size_t count, std::size_t root);

  template <DType D, class T>
  Status all_gather_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count);

  // Rooted and all-to-all collectives: every rank publishes its buffers, one
  // phase, every rank moves the part it owns straight between the published
  // buffers (no staging copy), a closing phase so nobody leaves while a peer
  // still reads its buffers.

  template <DType D, ReduceOp Op, class T>
  Status reduce_impl(dtype_tag<D> d, op_tag<Op> o, const T* send, T* recv, std::size_t count, std::size_t root);

  template <DType D, class T>
  Status gather_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count, std::size_t root);

  template <DType D, class T>
  Status scatter_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count, std::size_t root);

  template <DType D, class T>
  Status all_to_all_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count);

  template <DType D, class T>
  Status all_gather_v_impl(dtype_tag<D>, const T* send, std::size_t send_count, T* recv, const VLayout& layout);

  template <DType D, class T>
  Status all_to_all_v_impl(dtype_tag<D>, const T* send, const VLayout& sl, T* recv, const VLayout& rl);

  // p2p is posted as it is submitted and the exchange pattern cannot
  // deadlock, so a group has nothing to batch; it only nests.
  Status group_start_impl();
  Status group_end_impl();

  // The reductions' bodies, one for every (dtype, op) pair: the *_impl
  // templates above pass the pair's detail::threads::Reduction.
  Status all_reduce_into(const detail::threads::Reduction& r, void* buf, std::size_t count);
  Status reduce_scatter_into(const detail::threads::Reduction& r, const void* send, void* recv, std::size_t count);
  Status reduce_into(const detail::threads::Reduction& r, const void* send, void* recv, std::size_t count,
                     std::size_t root);

  // ------------------------------------------------------------ point to point

  template <DType D, class T>
  Status send_impl(dtype_tag<D>, const T* ptr, std::size_t count, std::size_t dest, std::uint32_t tag);

  template <DType D, class T>
  Status recv_impl(dtype_tag<D>, T* ptr, std::size_t count, std::size_t src, std::uint32_t tag);

  // The first unmatched send to this rank that a receive from (src, tag)
  // posted now would take; the mailbox holds exactly those (a send that finds
  // a posted receive is delivered at once).
  Result<std::optional<detail::Envelope>> probe_impl(std::size_t src, std::uint32_t tag);

  // Copies a matched pair and completes both sides. Runs on whichever thread
  // posted the second half of the pair.
  void deliver(const detail::threads::PendingSend& s, const detail::threads::PendingRecv& r, std::size_t receiver);

  static void complete(RankState& r) noexcept {
    r.p2p_pending.fetch_sub(1, std::memory_order_acq_rel);
    r.p2p_pending.notify_all();
  }

  Status sync_impl();

  // Waits until this rank's p2p operations completed; `call` names the blocking
  // point in the error (sync or barrier), `dl` is that point's one deadline.
  // Not moved-from (the callers check).
  Status drain(const detail::CallDesc& call, std::optional<detail::Clock::time_point> dl);

  // One deadline for both halves: draining p2p and the rendezvous together
  // stay within op_timeout.
  Status barrier_impl();

  // ------------------------------------------------------------ split

  Result<std::optional<Threads>> split_impl(std::uint32_t color, std::uint32_t key);

  // ------------------------------------------------------------ diagnostics and teardown

  // "#4 all_reduce(...), #2 recv(...)": the collective in progress and this rank's unmatched p2p.
  std::string pending_text(const detail::CallDesc* collective) const;

  // Removes this rank's unmatched operations from every mailbox; returns how many.
  std::size_t cancel_unmatched(std::string& names) noexcept;

  // The drop contract: wait at most drop_timeout for pending point-to-point
  // work, then log and withdraw it so no peer touches this rank's buffers.
  void release() noexcept;

  bool moved_from_impl() const noexcept { return !world_; }
  // Options::on_error: the front end printed `e`; wake every rank of the world
  // (their blocking calls return Errc::aborted) before it ends the process.
  void abort_impl(const Error& e) const noexcept;
  Error moved_from(const detail::CallDesc& call) const { return detail::moved_from_error(call, backend_name); }
  // Every rank that meets the abort, wherever it waits or whatever it calls
  // next, gets the first cause: which rank timed out in which call waiting
  // for whom, or which rank's function threw.
  // Precondition: world_->aborted was seen set (acquire), so the cause is written.
  Error aborted_error(const detail::CallDesc& call) const;

  std::shared_ptr<World> world_;
  std::size_t rank_ = 0;
};

// The non-template members: in libpolycoll (src/threads.cpp), or inline with
// POLYCOLL_HEADER_ONLY (detail/linkage.hpp).
#if defined(POLYCOLL_HEADER_ONLY) || defined(POLYCOLL_DETAIL_DEFINE_THREADS)
}  // namespace polycoll

#include <algorithm>  // what only the definitions use

namespace polycoll {

POLYCOLL_DETAIL_LIB_INLINE Result<std::vector<Threads>> Threads::make(std::size_t n, const Options& options) {
  if (auto s = detail::check_on_error_environment(detail::cat("Threads::create(n=", n, ") [threads]")); !s)
    return tl::unexpected(std::move(s.error()));
  if (n == 0) return fail(Errc::invalid_argument, "Threads::create(n=0) [threads]: a world needs at least one rank");
  if (const char* what = detail::threads::World::too_large(n);
      what != nullptr || n > std::vector<Threads>().max_size()) [[unlikely]] {
    return fail(Errc::invalid_argument, detail::cat("Threads::create(n=", n, ") [threads]: too many ranks: the size of ",
                                                    what != nullptr ? what : "the communicator list",
                                                    " overflows the address space"));
  }
  try {
    auto world = std::make_shared<detail::threads::World>(n, options);
    std::vector<Threads> comms;
    comms.reserve(n);
    for (std::size_t r = 0; r < n; ++r) comms.push_back(Threads(world, r));
    return comms;
  } catch (const std::bad_alloc&) {
    return fail(Errc::backend_failure, detail::cat("Threads::create(n=", n, ") [threads]: out of memory"));
  } catch (const std::length_error&) {
    return fail(Errc::backend_failure, detail::cat("Threads::create(n=", n, ") [threads]: out of memory"));
  }
}

POLYCOLL_DETAIL_LIB_INLINE detail::FlightRecorder* Threads::flight_recorder_impl() const noexcept {
  return world_ ? me().flight.get() : nullptr;
}

POLYCOLL_DETAIL_LIB_INLINE std::vector<detail::RankRecorder> Threads::reachable_recorders_impl() const {
  std::vector<detail::RankRecorder> rings;
  if (!world_) return rings;
  for (std::size_t q = 0; q < world_->n; ++q) {
    if (peer(q).flight) rings.push_back({q, peer(q).flight.get()});
  }
  return rings;
}

POLYCOLL_DETAIL_LIB_INLINE Result<Threads::Collective> Threads::begin(detail::CallDesc call) {
  if (!world_) return tl::unexpected(moved_from(call));
  RankState& m = me();
  std::unique_lock lock(m.submit);
  if (world_->aborted.load(std::memory_order_acquire)) return tl::unexpected(aborted_error(call));
  call.seq = ++m.seq;
  return Collective{std::move(lock), call};
}

POLYCOLL_DETAIL_LIB_INLINE Status Threads::phase(const detail::CallDesc& call, std::optional<detail::Clock::time_point> deadline) {
  RankState& m = me();
  World& w = *world_;
  const std::uint32_t p = ++m.phases;
  auto& mine = m.line[p & 1].phase;
  mine.store(p, std::memory_order_release);
  mine.notify_all();  // a load of the waiter count unless someone sleeps on it
  for (std::size_t q = 0; q < w.n; ++q) {
    if (q == rank_) continue;
    const auto r = detail::wait_until(
        peer(q).line[p & 1].phase, [p](std::uint32_t v) { return detail::threads::reached(v, p); }, w.aborted,
        deadline, w.spin);
    if (r == detail::WaitResult::ready) continue;
    if (r == detail::WaitResult::aborted) return tl::unexpected(aborted_error(call));
    // Who is missing, and what each of them is doing (its flight record's newest call).
    std::string missing, doing;
    for (std::size_t k = 0; k < w.n; ++k) {
      if (!detail::threads::reached(peer(k).line[p & 1].phase.load(std::memory_order_acquire), p)) {
        missing += detail::cat(missing.empty() ? "" : ", ", k);
        doing += detail::cat("; rank ", k, "'s last call: ",
                             peer(k).flight ? peer(k).flight->last_text() : std::string("unknown (no flight record)"));
      }
    }
    const std::string waited =
        detail::cat("timed out after ", w.options.op_timeout->count(), " ms waiting for rank(s) ", missing,
                    " to arrive");
    const std::string what =
        detail::cat(waited, doing, "; pending: ", pending_text(&call), "; the communicator is aborted");
    w.abort(detail::cat("rank ", rank_, " ", waited, " in ", detail::describe(call)));
    return tl::unexpected(error(Errc::timeout, call, what));
  }
  return {};
}

POLYCOLL_DETAIL_LIB_INLINE Status Threads::arrive(const detail::CallDesc& call, std::optional<detail::Clock::time_point> dl) {
  if (!world_->check) return phase(call, dl);
  // The fingerprint rides in this rank's arrival line, which every peer
  // reads to see the phase anyway: the check adds no cache-line transfer.
  const unsigned parity = next_parity();
  constexpr std::size_t at = detail::threads::checked_inline_bytes;
  const detail::PackedFingerprint mine = detail::pack_fingerprint(call);
  std::memcpy(me().line[parity].data + at, &mine, sizeof mine);
  if (auto s = phase(call, dl); !s) return s;
  bool same = true;
  for (std::size_t q = 0; q < world_->n; ++q) {
    if (q == rank_) continue;
    detail::PackedFingerprint theirs;
    std::memcpy(&theirs, peer(q).line[parity].data + at, sizeof theirs);
    same = same && theirs == mine;
  }
  if (same) [[likely]] return {};
  return mismatch(call, parity, dl);
}

POLYCOLL_DETAIL_LIB_INLINE Status Threads::mismatch(const detail::CallDesc& call, unsigned parity,
                                                      std::optional<detail::Clock::time_point> dl) {
  // Every rank is here: if any two fingerprints differ, each rank differs
  // from at least one of them. So one more phase is safe, and keeps the
  // ranks in step; after it each rank reads the others' full descriptions.
  me().current[parity] = call;
  if (auto s = phase(call, dl); !s) return s;
  std::string diff;
  for (std::size_t q = 0; q < world_->n; ++q) {
    const detail::CallDesc& other = peer(q).current[parity];
    if (!detail::same_collective(other, call)) {
      diff += detail::cat(diff.empty() ? "" : "; ", "rank ", q, " called ", detail::describe(other));
    }
  }
  if (diff.empty()) diff = "the fingerprints differ";  // unreachable: they are functions of the descriptions
  return tl::unexpected(error(Errc::mismatch, call, detail::cat("consistency check failed: ", diff)));
}

POLYCOLL_DETAIL_LIB_INLINE Status Threads::group_start_impl() {
  if (!world_) return tl::unexpected(moved_from(detail::CallDesc::plain(detail::Call::group_start)));
  me().groups.fetch_add(1, std::memory_order_relaxed);
  return {};
}

POLYCOLL_DETAIL_LIB_INLINE Status Threads::group_end_impl() {
  const auto call = detail::CallDesc::plain(detail::Call::group_end);
  if (!world_) return tl::unexpected(moved_from(call));
  auto& g = me().groups;
  std::size_t open = g.load(std::memory_order_relaxed);
  do {
    if (open == 0) return tl::unexpected(error(Errc::invalid_argument, call, "no open group (group_end without group_start)"));
  } while (!g.compare_exchange_weak(open, open - 1, std::memory_order_relaxed));
  return {};
}

POLYCOLL_DETAIL_LIB_INLINE Result<std::optional<detail::Envelope>> Threads::probe_impl(std::size_t src, std::uint32_t tag) {
  const auto call = detail::CallDesc::p2p(detail::Call::probe, detail::npos, DType::U8, src, tag);
  if (!world_) return tl::unexpected(moved_from(call));
  if (world_->aborted.load(std::memory_order_acquire)) return tl::unexpected(aborted_error(call));
  RankState& m = me();
  std::lock_guard lock(m.mailbox);
  for (const auto& s : m.sends) {
    if (detail::threads::matches(src, tag, s.src, s.call.tag)) {
      return std::optional<detail::Envelope>{detail::Envelope{s.src, s.call.tag, s.bytes}};
    }
  }
  return std::optional<detail::Envelope>{};
}

POLYCOLL_DETAIL_LIB_INLINE void Threads::deliver(const detail::threads::PendingSend& s, const detail::threads::PendingRecv& r, std::size_t receiver) {
  RankState& rx = peer(receiver);
  std::optional<Error> err;
  if (s.call.dtype != r.call.dtype) {
    err = detail::call_error(Errc::mismatch, r.call, receiver, world_->n, backend_name,
                             detail::cat("matched ", detail::describe(s.call), " from rank ", s.src,
                                         ", which sends another dtype"));
  } else if (s.bytes > r.bytes) {
    err = detail::call_error(Errc::truncated, r.call, receiver, world_->n, backend_name,
                             detail::cat("message truncated: rank ", s.src, " sent ", s.call.count,
                                         " elements with tag ", s.call.tag, ", recv posted for ", r.call.count));
  } else if (s.bytes != 0) {
    detail::threads::copy(r.ptr, s.data(), s.bytes);
  }
  if (err) {
    std::lock_guard g(rx.error_mutex);
    if (!rx.p2p_error) rx.p2p_error = std::move(err);
  }
  complete(peer(s.src));
  complete(rx);
}

POLYCOLL_DETAIL_LIB_INLINE Status Threads::sync_impl() {
  const auto call = detail::CallDesc::plain(detail::Call::sync);
  if (!world_) return tl::unexpected(moved_from(call));
  return drain(call, deadline());
}

POLYCOLL_DETAIL_LIB_INLINE Status Threads::drain(const detail::CallDesc& call, std::optional<detail::Clock::time_point> dl) {
  World& w = *world_;
  RankState& m = me();
  // The sends this sync completes: those recorded before it began (another
  // thread's send posted while it waits belongs to a later sync).
  const std::uint64_t sends_before = w.check ? m.ledger.mark() : 0;
  const auto r = detail::wait_until(
      m.p2p_pending, [](std::uint32_t v) { return v == 0; }, w.aborted, dl, w.spin);
  if (r == detail::WaitResult::aborted) return tl::unexpected(aborted_error(call));
  if (r == detail::WaitResult::timeout) {
    const std::string pending = pending_text(nullptr);
    const std::string what = detail::cat("timed out after ", w.options.op_timeout->count(), " ms; pending: ",
                                         pending, "; the communicator is aborted");
    w.abort(detail::cat("rank ", rank_, " timed out after ", w.options.op_timeout->count(), " ms in ",
                        detail::describe(call), " with pending: ", pending));
    return tl::unexpected(error(Errc::timeout, call, what));
  }
  // Every send of this rank completed: with the check on, none of their
  // buffers may have changed since it was posted.
  std::optional<detail::CallDesc> changed;
  if (w.check) [[unlikely]] changed = m.ledger.verify(sends_before);
  std::lock_guard g(m.error_mutex);
  if (m.p2p_error) {
    Error e = std::move(*m.p2p_error);
    m.p2p_error.reset();
    return tl::unexpected(std::move(e));
  }
  if (changed) return tl::unexpected(error(Errc::mismatch, *changed, detail::send_changed_text));
  return {};
}

POLYCOLL_DETAIL_LIB_INLINE Status Threads::barrier_impl() {
  const auto call = detail::CallDesc::plain(detail::Call::barrier);
  if (!world_) return tl::unexpected(moved_from(call));
  const auto dl = deadline();
  if (auto s = drain(call, dl); !s) return s;
  auto c = begin(detail::CallDesc::plain(detail::Call::barrier));
  if (!c) return tl::unexpected(std::move(c.error()));
  return arrive(c->call, dl);
}

POLYCOLL_DETAIL_LIB_INLINE Result<std::optional<Threads>> Threads::split_impl(std::uint32_t color, std::uint32_t key) {
  auto c = begin(detail::CallDesc::plain(detail::Call::split));
  if (!c) return tl::unexpected(std::move(c.error()));
  const auto dl = deadline();
  RankState& m = me();
  m.color = color;
  m.key = key;
  m.split_result.reset();
  if (auto s = arrive(c->call, dl); !s) return tl::unexpected(std::move(s.error()));
  // Members of my color ordered by (key, old rank); the first creates the world.
  std::vector<std::size_t> members;
  if (color != no_color) {
    for (std::size_t q = 0; q < world_->n; ++q) {
      if (peer(q).color == color) members.push_back(q);
    }
    std::stable_sort(members.begin(), members.end(),
                     [&](std::size_t a, std::size_t b) { return peer(a).key < peer(b).key; });
    if (members.front() == rank_) {
      try {
        m.split_result = std::make_shared<World>(members.size(), world_->options);
      } catch (const std::bad_alloc&) {
        m.split_result.reset();
      }
      // Registered with its parent, so that Threads::run's abort reaches it.
      if (m.split_result && !world_->adopt(m.split_result)) m.split_result.reset();
    }
  }
  if (auto s = phase(c->call, dl); !s) return tl::unexpected(std::move(s.error()));
  std::shared_ptr<World> sub;
  std::size_t sub_rank = 0;
  if (color != no_color) {
    sub = peer(members.front()).split_result;
    sub_rank = static_cast<std::size_t>(std::find(members.begin(), members.end(), rank_) - members.begin());
  }
  // Nobody may leave before every member copied the leader's pointer.
  if (auto s = phase(c->call, dl); !s) return tl::unexpected(std::move(s.error()));
  m.split_result.reset();
  if (color == no_color) return std::optional<Threads>{};
  if (!sub) return tl::unexpected(error(Errc::backend_failure, c->call, "out of memory creating the sub-communicator"));
  return std::optional<Threads>{Threads(std::move(sub), sub_rank)};
}

POLYCOLL_DETAIL_LIB_INLINE std::string Threads::pending_text(const detail::CallDesc* collective) const {
  std::string s;
  auto add = [&](const detail::CallDesc& c) {
    if (!s.empty()) s += ", ";
    s += detail::describe(c);
  };
  if (collective) add(*collective);
  for (std::size_t q = 0; q < world_->n; ++q) {
    RankState& box = peer(q);
    std::lock_guard lock(box.mailbox);
    for (const auto& snd : box.sends) {
      if (snd.src == rank_) add(snd.call);
    }
    if (q == rank_) {
      for (const auto& rcv : box.recvs) add(rcv.call);
    }
  }
  return s.empty() ? "none" : s;
}

POLYCOLL_DETAIL_LIB_INLINE std::size_t Threads::cancel_unmatched(std::string& names) noexcept {
  std::size_t removed = 0;
  for (std::size_t q = 0; q < world_->n; ++q) {
    RankState& box = peer(q);
    std::lock_guard lock(box.mailbox);
    auto mine = [&](const detail::threads::PendingSend& snd) { return snd.src == rank_; };
    for (const auto& snd : box.sends) {
      if (mine(snd)) names += detail::cat(names.empty() ? "" : ", ", detail::describe(snd.call));
    }
    const auto before = box.sends.size();
    std::erase_if(box.sends, mine);
    removed += before - box.sends.size();
    if (q == rank_) {
      for (const auto& rcv : box.recvs) names += detail::cat(names.empty() ? "" : ", ", detail::describe(rcv.call));
      removed += box.recvs.size();
      box.recvs.clear();
    }
  }
  return removed;
}

POLYCOLL_DETAIL_LIB_INLINE void Threads::release() noexcept {
  if (!world_) return;
  try {
    World& w = *world_;
    RankState& m = me();
    if (!w.aborted.load(std::memory_order_acquire) && m.p2p_pending.load(std::memory_order_acquire) != 0) {
      const auto dl = detail::Clock::now() + w.options.drop_timeout;
      const auto r = detail::wait_until(
          m.p2p_pending, [](std::uint32_t v) { return v == 0; }, w.aborted, dl, w.spin);
      if (r != detail::WaitResult::ready) {
        std::string names;
        const std::size_t removed = cancel_unmatched(names);
        m.p2p_pending.fetch_sub(static_cast<std::uint32_t>(removed), std::memory_order_acq_rel);
        // What remains was matched and is being copied right now: that ends shortly.
        (void)detail::wait_until(
            m.p2p_pending, [](std::uint32_t v) { return v == 0 || v >= (1u << 30); }, w.aborted,
            detail::Clock::now() + std::chrono::milliseconds(100), w.spin);
        log(LogLevel::warning, detail::cat("Threads communicator (rank ", rank_, " of ", w.n, ") destroyed with ",
                                           removed, " unmatched operation(s) after waiting ",
                                           w.options.drop_timeout.count(), " ms; dropped: ", names));
      }
    } else if (w.aborted.load(std::memory_order_acquire)) {
      std::string names;
      (void)cancel_unmatched(names);
    }
  } catch (...) {
    // Only message formatting can throw (bad_alloc); the contract is to never throw.
  }
  world_.reset();
}

POLYCOLL_DETAIL_LIB_INLINE void Threads::abort_impl(const Error& e) const noexcept {
  if (!world_) return;
  try {
    world_->abort(detail::cat("rank ", rank_, " stopped the program (on_error=abort): ", e.message));
  } catch (...) {
    world_->abort(std::string{});
  }
}

POLYCOLL_DETAIL_LIB_INLINE Error Threads::aborted_error(const detail::CallDesc& call) const {
  return error(Errc::aborted, call, detail::cat("the communicator was aborted: ", world_->abort_cause));
}

POLYCOLL_DETAIL_LIB_INLINE Status Threads::all_reduce_into(const detail::threads::Reduction& r, void* buf,
                                                           std::size_t count) {
  auto c = begin(detail::CallDesc::reduction(detail::Call::all_reduce, count, r.dtype, r.op));
  if (!c) return tl::unexpected(std::move(c.error()));
  const auto dl = deadline();
  const std::size_t n = world_->n;
  const std::size_t bytes = count * r.size;
  auto* const b = static_cast<std::byte*>(buf);
  if (n == 1) {
    return {};  // avg over one rank divides by 1
  }
  if (bytes <= detail::threads::small_bytes) {
    const unsigned parity = next_parity();
    detail::threads::copy(outbox(bytes, parity), buf, bytes);
    if (auto s = arrive(c->call, dl); !s) return s;
    if (n == 2 && r.op != ReduceOp::Avg) {
      // The common 2-rank case: one binary step in rank order (the same
      // rounding as the fold), my own contribution read from my buffer.
      const void* other = inbox(1 - rank_, bytes, parity);
      r.combine(buf, rank_ == 0 ? buf : other, rank_ == 0 ? other : buf, count);
      return {};
    }
    detail::threads::Sources src(n);
    for (std::size_t q = 0; q < n; ++q) src[q] = inbox(q, bytes, parity);
    r.fold(buf, src.data(), n, count, n);
    return {};
  }
  RankState& m = me();
  m.recv = buf;
  if (auto s = arrive(c->call, dl); !s) return s;
  // This rank's slice, reduced in rank order like the latency path, so that
  // every element of every size is folded 0, 1, ..., n-1; the destination is
  // exactly source rank_ (combine_n allows it).
  if (const auto [lo, hi] = slice(count, r.size, rank_); hi > lo) {
    detail::threads::Sources src(n);
    for (std::size_t q = 0; q < n; ++q) src[q] = static_cast<const std::byte*>(peer(q).recv) + lo * r.size;
    r.fold(b + lo * r.size, src.data(), n, hi - lo, n);
  }
  if (auto s = phase(c->call, dl); !s) return s;
  for (std::size_t q = 0; q < n; ++q) {
    if (q == rank_) continue;
    const auto [lo, hi] = slice(count, r.size, q);
    if (hi > lo) {
      detail::threads::copy(b + lo * r.size, static_cast<const std::byte*>(peer(q).recv) + lo * r.size,
                            (hi - lo) * r.size);
    }
  }
  return phase(c->call, dl);
}

POLYCOLL_DETAIL_LIB_INLINE Status Threads::reduce_scatter_into(const detail::threads::Reduction& r, const void* send,
                                                               void* recv, std::size_t count) {
  auto c = begin(detail::CallDesc::reduction(detail::Call::reduce_scatter, count, r.dtype, r.op));
  if (!c) return tl::unexpected(std::move(c.error()));
  const auto dl = deadline();
  const std::size_t n = world_->n;
  const std::size_t block = count * r.size;  // one rank's block of send
  if (n == 1) {
    if (count != 0 && send != recv) std::memmove(recv, send, block);
    return {};
  }
  const std::size_t bytes = n * block;
  detail::threads::Sources src(n);
  RankState& m = me();
  if (bytes <= detail::threads::small_bytes) {
    const unsigned parity = next_parity();
    detail::threads::copy(outbox(bytes, parity), send, bytes);
    if (auto s = arrive(c->call, dl); !s) return s;
    for (std::size_t q = 0; q < n; ++q) src[q] = inbox(q, bytes, parity) + rank_ * block;
    r.fold(recv, src.data(), n, count, n);
    return {};
  }
  m.send = send;
  if (auto s = arrive(c->call, dl); !s) return s;
  // In rank order, as on the latency path; an in-place recv (= send +
  // rank*count) is exactly source rank_, which combine_n allows.
  for (std::size_t q = 0; q < n; ++q) src[q] = static_cast<const std::byte*>(peer(q).send) + rank_ * block;
  r.fold(recv, src.data(), n, count, n);
  return phase(c->call, dl);
}

POLYCOLL_DETAIL_LIB_INLINE Status Threads::reduce_into(const detail::threads::Reduction& r, const void* send,
                                                       void* recv, std::size_t count, std::size_t root) {
  auto desc = detail::CallDesc::reduction(detail::Call::reduce, count, r.dtype, r.op);
  desc.root = root;
  auto c = begin(desc);
  if (!c) return tl::unexpected(std::move(c.error()));
  const auto dl = deadline();
  const std::size_t n = world_->n;
  if (n == 1) {
    detail::threads::move(recv, send, count * r.size);
    return {};
  }
  RankState& m = me();
  m.send = send;
  m.recv = recv;
  if (auto s = arrive(c->call, dl); !s) return s;
  // This rank's slice of the result, folded in rank order straight into the
  // root's recv; in place that is exactly source `root`, which combine_n allows.
  const auto [lo, hi] = slice(count, r.size, rank_);
  if (hi > lo) {
    detail::threads::Sources src(n);
    for (std::size_t q = 0; q < n; ++q) src[q] = static_cast<const std::byte*>(peer(q).send) + lo * r.size;
    r.fold(static_cast<std::byte*>(peer(root).recv) + lo * r.size, src.data(), n, hi - lo, n);
  }
  return phase(c->call, dl);
}
#endif

template <DType D, ReduceOp Op, class T>
Status Threads::all_reduce_impl(dtype_tag<D>, op_tag<Op>, T* buf, std::size_t count) {
  return all_reduce_into(detail::threads::reduction_of<D, Op>, buf, count);
}

template <DType D, ReduceOp Op, class T>
Status Threads::reduce_scatter_impl(dtype_tag<D>, op_tag<Op>, const T* send, T* recv, std::size_t count) {
  return reduce_scatter_into(detail::threads::reduction_of<D, Op>, send, recv, count);
}

template <DType D, class T>
Status Threads::broadcast_impl(dtype_tag<D>, T* buf, std::size_t count, std::size_t root) {
  auto c = begin(detail::CallDesc::rooted(detail::Call::broadcast, count, D, root));
  if (!c) return tl::unexpected(std::move(c.error()));
  const auto dl = deadline();
  if (world_->n == 1) return {};
  const std::size_t bytes = count * sizeof(T);
  RankState& m = me();
  if (bytes <= detail::threads::small_bytes) {
    const unsigned parity = next_parity();
    if (rank_ == root) detail::threads::copy(outbox(bytes, parity), buf, bytes);
    if (auto s = arrive(c->call, dl); !s) return s;
    if (rank_ != root) detail::threads::copy(buf, inbox(root, bytes, parity), bytes);
    return {};
  }
  m.recv = buf;
  if (auto s = arrive(c->call, dl); !s) return s;
  if (rank_ != root) detail::threads::copy(buf, peer(root).recv, bytes);
  return phase(c->call, dl);
}

template <DType D, class T>
Status Threads::all_gather_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count) {
  auto c = begin(detail::CallDesc::movement(detail::Call::all_gather, count, D));
  if (!c) return tl::unexpected(std::move(c.error()));
  const auto dl = deadline();
  const std::size_t n = world_->n;
  const std::size_t bytes = count * sizeof(T);
  RankState& m = me();
  T* mine = recv + rank_ * count;
  if (bytes != 0 && static_cast<const void*>(send) != static_cast<const void*>(mine)) {
    std::memmove(mine, send, bytes);
  }
  if (n == 1) return {};
  if (bytes <= detail::threads::small_bytes) {
    const unsigned parity = next_parity();
    detail::threads::copy(outbox(bytes, parity), mine, bytes);
    if (auto s = arrive(c->call, dl); !s) return s;
    for (std::size_t q = 0; q < n; ++q) {
      if (q != rank_) detail::threads::copy(recv + q * count, inbox(q, bytes, parity), bytes);
    }
    return {};
  }
  m.send = mine;
  if (auto s = arrive(c->call, dl); !s) return s;
  for (std::size_t q = 0; q < n; ++q) {
    if (q != rank_) detail::threads::copy(recv + q * count, peer(q).send, bytes);
  }
  return phase(c->call, dl);
}

template <DType D, ReduceOp Op, class T>
Status Threads::reduce_impl(dtype_tag<D>, op_tag<Op>, const T* send, T* recv, std::size_t count, std::size_t root) {
  return reduce_into(detail::threads::reduction_of<D, Op>, send, recv, count, root);
}

template <DType D, class T>
Status Threads::gather_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count, std::size_t root) {
  auto c = begin(detail::CallDesc::rooted(detail::Call::gather, count, D, root));
  if (!c) return tl::unexpected(std::move(c.error()));
  const auto dl = deadline();
  if (world_->n == 1) {
    detail::threads::move(recv, send, count * sizeof(T));
    return {};
  }
  me().recv = recv;
  if (auto s = arrive(c->call, dl); !s) return s;
  detail::threads::move(static_cast<T*>(peer(root).recv) + rank_ * count, send, count * sizeof(T));
  return phase(c->call, dl);
}

template <DType D, class T>
Status Threads::scatter_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count, std::size_t root) {
  auto c = begin(detail::CallDesc::rooted(detail::Call::scatter, count, D, root));
  if (!c) return tl::unexpected(std::move(c.error()));
  const auto dl = deadline();
  if (world_->n == 1) {
    detail::threads::move(recv, send, count * sizeof(T));
    return {};
  }
  me().send = send;
  if (auto s = arrive(c->call, dl); !s) return s;
  detail::threads::move(recv, static_cast<const T*>(peer(root).send) + rank_ * count, count * sizeof(T));
  return phase(c->call, dl);
}

template <DType D, class T>
Status Threads::all_to_all_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count) {
  auto c = begin(detail::CallDesc::movement(detail::Call::all_to_all, count, D));
  if (!c) return tl::unexpected(std::move(c.error()));
  const auto dl = deadline();
  const std::size_t n = world_->n;
  me().send = send;
  if (n > 1) {
    if (auto s = arrive(c->call, dl); !s) return s;
  }
  for (std::size_t q = 0; q < n; ++q) {
    detail::threads::copy(recv + q * count, static_cast<const T*>(peer(q).send) + rank_ * count, count * sizeof(T));
  }
  return n > 1 ? phase(c->call, dl) : Status{};
}

template <DType D, class T>
Status Threads::all_gather_v_impl(dtype_tag<D>, const T* send, std::size_t send_count, T* recv, const VLayout& layout) {
  auto c = begin(detail::CallDesc::movement(detail::Call::all_gather_v, layout.total(), D));
  if (!c) return tl::unexpected(std::move(c.error()));
  const auto dl = deadline();
  const std::size_t n = world_->n;
  RankState& m = me();
  m.send = send;
  m.send_count = send_count;
  if (n > 1) {
    if (auto s = arrive(c->call, dl); !s) return s;
  }
  std::string bad;
  layout.each([&](std::size_t q, std::size_t cnt, std::size_t displ) {
    const std::size_t sent = peer(q).send_count;
    if (sent != cnt) {
      bad += detail::cat(bad.empty() ? "" : "; ", "rank ", q, " sends ", sent, ", recv_counts[", q, "] = ", cnt);
    } else {
      detail::threads::move(recv + displ, static_cast<const T*>(peer(q).send), cnt * sizeof(T));
    }
  });
  if (n > 1) {
    if (auto s = phase(c->call, dl); !s) return s;
  }
  if (!bad.empty()) return tl::unexpected(error(Errc::mismatch, c->call, detail::cat("counts disagree: ", bad)));
  return {};
}

template <DType D, class T>
Status Threads::all_to_all_v_impl(dtype_tag<D>, const T* send, const VLayout& sl, T* recv, const VLayout& rl) {
  auto c = begin(detail::CallDesc::movement(detail::Call::all_to_all_v, detail::npos, D));
  if (!c) return tl::unexpected(std::move(c.error()));
  const auto dl = deadline();
  const std::size_t n = world_->n;
  RankState& m = me();
  m.send = send;
  m.send_layout = sl;
  if (n > 1) {
    if (auto s = arrive(c->call, dl); !s) return s;
  }
  std::string bad;
  Errc code = Errc::mismatch;
  rl.each([&](std::size_t q, std::size_t cnt, std::size_t displ) {
    const VLayout& theirs = peer(q).send_layout;
    const std::size_t sent = theirs.count(rank_);
    if (sent != cnt) {
      if (sent > cnt) code = Errc::truncated;
      bad += detail::cat(bad.empty() ? "" : "; ", "rank ", q, " sends ", sent, ", recv_counts[", q, "] = ", cnt);
    } else {
      detail::threads::copy(recv + displ, static_cast<const T*>(peer(q).send) + theirs.displ(rank_),
                            cnt * sizeof(T));
    }
  });
  if (n > 1) {
    if (auto s = phase(c->call, dl); !s) return s;
  }
  if (!bad.empty()) return tl::unexpected(error(code, c->call, detail::cat("counts disagree: ", bad)));
  return {};
}

template <DType D, class T>
Status Threads::send_impl(dtype_tag<D>, const T* ptr, std::size_t count, std::size_t dest, std::uint32_t tag) {
  const auto call = detail::CallDesc::p2p(detail::Call::send, count, D, dest, tag);
  if (!world_) return tl::unexpected(moved_from(call));
  if (world_->aborted.load(std::memory_order_acquire)) return tl::unexpected(aborted_error(call));
  RankState& m = me();
  RankState& box = peer(dest);
  const std::size_t bytes = count * sizeof(T);
  if (world_->check) [[unlikely]] m.ledger.record(call, ptr, bytes);
  m.p2p_pending.fetch_add(1, std::memory_order_relaxed);
  std::unique_lock lock(box.mailbox);
  // The earliest posted receive that matches (MPI's order).
  auto it = box.recvs.begin();
  while (it != box.recvs.end() && !detail::threads::matches(it->call.peer, it->call.tag, rank_, tag)) ++it;
  if (it == box.recvs.end()) {
    detail::threads::PendingSend& s = box.sends.emplace_back();
    s.ptr = ptr;
    s.bytes = bytes;
    s.src = rank_;
    s.call = call;
    if (bytes <= detail::threads::eager_bytes) {
      detail::threads::copy(s.eager, ptr, bytes);
      s.copied = true;
    }
    return {};
  }
  const detail::threads::PendingRecv r = *it;
  box.recvs.erase(it);
  lock.unlock();
  detail::threads::PendingSend s;
  s.ptr = ptr;
  s.bytes = bytes;
  s.src = rank_;
  s.call = call;
  deliver(s, r, dest);
  return {};
}

template <DType D, class T>
Status Threads::recv_impl(dtype_tag<D>, T* ptr, std::size_t count, std::size_t src, std::uint32_t tag) {
  const auto call = detail::CallDesc::p2p(detail::Call::recv, count, D, src, tag);
  if (!world_) return tl::unexpected(moved_from(call));
  if (world_->aborted.load(std::memory_order_acquire)) return tl::unexpected(aborted_error(call));
  RankState& m = me();
  m.p2p_pending.fetch_add(1, std::memory_order_relaxed);
  std::unique_lock lock(m.mailbox);
  // The earliest arrived send that matches: sends from one rank arrive in
  // the order it posted them, so MPI's non-overtaking order holds, for a
  // wildcard receive too.
  auto it = m.sends.begin();
  while (it != m.sends.end() && !detail::threads::matches(src, tag, it->src, it->call.tag)) ++it;
  if (it == m.sends.end()) {
    m.recvs.push_back({ptr, count * sizeof(T), call});
    return {};
  }
  detail::threads::PendingSend s;
  s.take(*it);
  m.sends.erase(it);
  lock.unlock();
  deliver(s, {ptr, count * sizeof(T), call}, rank_);
  return {};
}

/// @cond POLYCOLL_LIBRARY_INTERNALS
// libpolycoll holds the seed surface of Threads (and so AnyCommunicator's
// table for it), and every collective and point-to-point call of it for each
// dtype and valid (dtype, op) pair: the seed surface's dispatch is compiled
// once there, and a typed call in a user TU compiles to a call into the
// library instead of to the collective's code. The definitions above are not
// inline (out of the class), so the `extern template` suppresses them; with
// POLYCOLL_HEADER_ONLY they are instantiated where used.
#if !defined(POLYCOLL_HEADER_ONLY)
extern template class Communicator<Threads>;
extern template const AnyCommunicator::VTable& AnyCommunicator::vtable_of<Threads>() noexcept;
#if !defined(POLYCOLL_DETAIL_BUILDING_LIBRARY)
#define POLYCOLL_DETAIL_X(D, Op) POLYCOLL_DETAIL_BACKEND_PAIR(extern, Threads, D, Op)
POLYCOLL_DETAIL_FOR_EACH_VALID_PAIR(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X
#define POLYCOLL_DETAIL_X(D) POLYCOLL_DETAIL_BACKEND_DTYPE(extern, Threads, D)
POLYCOLL_DETAIL_FOR_EACH_DTYPE(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X
#endif
#endif
/// @endcond

}  // namespace polycoll
