#pragma once
/// @file communicator.hpp
/// Communicator<Backend>: the CRTP front end every backend derives from. It
/// owns the public surface (the seed surface on addresses and the typed
/// surface on spans), validates every call once, turns run-time DType/ReduceOp
/// into tags, checks the backend's capability traits, and only then calls the
/// backend's `*_impl`.

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include <polycoll/detail/call.hpp>
#include <polycoll/detail/layout.hpp>
#include <polycoll/dtype.hpp>
#include <polycoll/error.hpp>
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
};

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

template <class R>
using range_element_t = std::remove_reference_t<std::ranges::range_reference_t<R>>;

template <class R>
using range_value_t = std::remove_cv_t<range_element_t<R>>;

template <class T>
constexpr void check_element_type() {
  static_assert(is_element_type_v<T>,
                "polycoll: unsupported element type; use double, float, f16, bf16, f8e4m3, f8e5m2, "
                "std::int8_t..std::int64_t, std::uint8_t..std::uint64_t, bool, std::complex<float> or "
                "std::complex<double>");
}
}  // namespace detail

/// The front end. A backend `B` derives as `class B : public Communicator<B>`
/// and provides `world_size_impl()`, `rank_impl()`, the `*_impl` operations
/// taking `dtype_tag<D>` (and `op_tag<Op>` for reductions) with typed pointers,
/// `sync_impl()`, `barrier_impl()`, `split_impl()`, and
/// `static constexpr std::string_view backend_name`; optionally
/// `moved_from_impl()` (see error()). See docs/design.md.
template <class Backend>
class Communicator {
 public:
  /// Number of ranks.
  [[nodiscard]] std::size_t world_size() const noexcept { return self().world_size_impl(); }
  /// This rank, in [0, world_size()).
  [[nodiscard]] std::size_t rank() const noexcept { return self().rank_impl(); }

  // ---------------------------------------------------------------- seed surface

  /// In-place all-reduce of `count` elements at `ptr`.
  [[nodiscard]] Status all_reduce(std::uint64_t ptr, std::size_t count, DType dtype, ReduceOp op) {
    const auto c = detail::CallDesc::reduction(detail::Call::all_reduce, count, dtype, op);
    if (auto s = check_buffer(c, ptr, count, dtype, 1, "buffer"); !s) return s;
    return dispatch_reduction(c, [&](auto d, auto o) {
      using T = typename decltype(d)::type;
      return self().all_reduce_impl(d, o, detail::to_ptr<T>(ptr), count);
    });
  }

  /// In-place broadcast of `count` elements at `ptr` from `root`.
  [[nodiscard]] Status broadcast(std::uint64_t ptr, std::size_t count, DType dtype, std::size_t root) {
    const auto c = detail::CallDesc::rooted(detail::Call::broadcast, count, dtype, root);
    if (auto s = check_rank(c, root, "root"); !s) return s;
    if (auto s = check_buffer(c, ptr, count, dtype, 1, "buffer"); !s) return s;
    return dispatch_movement(c, [&](auto d) {
      using T = typename decltype(d)::type;
      return self().broadcast_impl(d, detail::to_ptr<T>(ptr), count, root);
    });
  }

  /// Gathers `count` elements from every rank into `recv` (count * world_size, rank order).
  [[nodiscard]] Status all_gather(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype) {
    const auto c = detail::CallDesc::movement(detail::Call::all_gather, count, dtype);
    if (auto s = check_buffer(c, send, count, dtype, 1, "send buffer"); !s) return s;
    if (auto s = check_buffer(c, recv, count, dtype, world_size(), "recv buffer"); !s) return s;
    if (auto s = check_in_block(c, send, recv, count, world_size(), rank(), "send buffer", "recv buffer"); !s)
      return s;
    return dispatch_movement(c, [&](auto d) {
      using T = typename decltype(d)::type;
      return self().all_gather_impl(d, detail::to_ptr<const T>(send), detail::to_ptr<T>(recv), count);
    });
  }

  /// Reduces `send` (count * world_size) and leaves block `rank()` (count elements) in `recv`.
  [[nodiscard]] Status reduce_scatter(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype,
                                      ReduceOp op) {
    const auto c = detail::CallDesc::reduction(detail::Call::reduce_scatter, count, dtype, op);
    if (auto s = check_buffer(c, send, count, dtype, world_size(), "send buffer"); !s) return s;
    if (auto s = check_buffer(c, recv, count, dtype, 1, "recv buffer"); !s) return s;
    if (auto s = check_in_block(c, recv, send, count, world_size(), rank(), "recv buffer", "send buffer"); !s)
      return s;
    return dispatch_reduction(c, [&](auto d, auto o) {
      using T = typename decltype(d)::type;
      return self().reduce_scatter_impl(d, o, detail::to_ptr<const T>(send), detail::to_ptr<T>(recv), count);
    });
  }

  /// Non-blocking send of `count` elements to `dest`; complete after sync().
  [[nodiscard]] Status send(std::uint64_t ptr, std::size_t count, DType dtype, std::size_t dest, std::uint32_t tag) {
    const auto c = detail::CallDesc::p2p(detail::Call::send, count, dtype, dest, tag);
    if (auto s = check_rank(c, dest, "dest"); !s) return s;
    if (auto s = check_buffer(c, ptr, count, dtype, 1, "buffer"); !s) return s;
    return dispatch_movement(c, [&](auto d) {
      using T = typename decltype(d)::type;
      return self().send_impl(d, detail::to_ptr<const T>(ptr), count, dest, tag);
    });
  }

  /// Non-blocking receive of `count` elements from `src`; complete after sync().
  [[nodiscard]] Status recv(std::uint64_t ptr, std::size_t count, DType dtype, std::size_t src, std::uint32_t tag) {
    const auto c = detail::CallDesc::p2p(detail::Call::recv, count, dtype, src, tag);
    if (auto s = check_rank(c, src, "src"); !s) return s;
    if (auto s = check_buffer(c, ptr, count, dtype, 1, "buffer"); !s) return s;
    return dispatch_movement(c, [&](auto d) {
      using T = typename decltype(d)::type;
      return self().recv_impl(d, detail::to_ptr<T>(ptr), count, src, tag);
    });
  }

  /// Reduces `count` elements of every rank's `send` into `recv` on `root`.
  /// `recv` is used on the root only (elsewhere it may be 0); in place on the
  /// root when `recv == send`.
  [[nodiscard]] Status reduce(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype, ReduceOp op,
                              std::size_t root) {
    auto c = detail::CallDesc::reduction(detail::Call::reduce, count, dtype, op);
    c.root = root;
    if (auto s = check_rooted(c, send, recv, count, 1, root, "send buffer", "recv buffer"); !s) return s;
    return dispatch_reduction(c, [&](auto d, auto o) {
      using T = typename decltype(d)::type;
      const T* s = detail::to_ptr<const T>(send);
      T* r = rank() == root ? detail::to_ptr<T>(recv) : nullptr;
      if constexpr (requires { self().reduce_impl(d, o, s, r, count, root); }) {
        return self().reduce_impl(d, o, s, r, count, root);
      } else {
        return not_implemented(c);
      }
    });
  }

  /// Gathers `count` elements from every rank into `recv` on `root`
  /// (count * world_size, rank order); `recv` is used on the root only. In
  /// place on the root when `send` is its own block of `recv`.
  [[nodiscard]] Status gather(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype,
                              std::size_t root) {
    const auto c = detail::CallDesc::rooted(detail::Call::gather, count, dtype, root);
    if (auto s = check_rooted(c, send, recv, count, world_size(), root, "send buffer", "recv buffer"); !s) return s;
    return dispatch_movement(c, [&](auto d) {
      using T = typename decltype(d)::type;
      const T* s = detail::to_ptr<const T>(send);
      T* r = rank() == root ? detail::to_ptr<T>(recv) : nullptr;
      if constexpr (requires { self().gather_impl(d, s, r, count, root); }) {
        return self().gather_impl(d, s, r, count, root);
      } else {
        return not_implemented(c);
      }
    });
  }

  /// Sends block q of `send` on `root` (count * world_size) to rank q's `recv`
  /// (count); `send` is used on the root only. In place on the root when
  /// `recv` is its own block of `send`.
  [[nodiscard]] Status scatter(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype,
                               std::size_t root) {
    const auto c = detail::CallDesc::rooted(detail::Call::scatter, count, dtype, root);
    if (auto s = check_rooted(c, recv, send, count, world_size(), root, "recv buffer", "send buffer"); !s) return s;
    return dispatch_movement(c, [&](auto d) {
      using T = typename decltype(d)::type;
      const T* s = rank() == root ? detail::to_ptr<const T>(send) : nullptr;
      T* r = detail::to_ptr<T>(recv);
      if constexpr (requires { self().scatter_impl(d, s, r, count, root); }) {
        return self().scatter_impl(d, s, r, count, root);
      } else {
        return not_implemented(c);
      }
    });
  }

  /// Block q of `send` (count elements) goes to rank q, which stores it as block
  /// `rank()` of its `recv`; both hold count * world_size elements and must not overlap.
  [[nodiscard]] Status all_to_all(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype) {
    const auto c = detail::CallDesc::movement(detail::Call::all_to_all, count, dtype);
    if (auto s = check_buffer(c, send, count, dtype, world_size(), "send buffer"); !s) return s;
    if (auto s = check_buffer(c, recv, count, dtype, world_size(), "recv buffer"); !s) return s;
    const std::size_t bytes = count * world_size() * (is_known(dtype) ? size_of(dtype) : 1);
    if (auto s = check_disjoint(c, send, bytes, recv, bytes); !s) return s;
    return dispatch_movement(c, [&](auto d) {
      using T = typename decltype(d)::type;
      const T* s = detail::to_ptr<const T>(send);
      T* r = detail::to_ptr<T>(recv);
      if constexpr (requires { self().all_to_all_impl(d, s, r, count); }) {
        return self().all_to_all_impl(d, s, r, count);
      } else {
        return not_implemented(c);
      }
    });
  }

  /// all_gather with per-rank counts: rank q contributes `recv_counts[q]`
  /// elements (this rank's `send_count` must equal `recv_counts[rank()]`),
  /// stored at element offset `displs[q]` of `recv`; empty `displs` packs the
  /// blocks in rank order. In place when `send` is this rank's block of `recv`.
  /// The call's count in messages and fingerprints is the total gathered.
  [[nodiscard]] Status all_gather_v(std::uint64_t send, std::size_t send_count, std::uint64_t recv,
                                    std::span<const std::size_t> recv_counts, std::span<const std::size_t> displs,
                                    DType dtype) {
    auto c = detail::CallDesc::movement(detail::Call::all_gather_v, send_count, dtype);
    if (recv_counts.size() == world_size()) {
      c.count = 0;
      for (std::size_t n : recv_counts) c.count += n;
    }
    std::size_t extent = 0;
    if (auto s = check_v(c, recv_counts, displs, "recv_counts", "displs", extent); !s) return s;
    if (recv_counts[rank()] != send_count) {
      return tl::unexpected(error(Errc::invalid_argument, c,
                                  detail::cat("send_count ", send_count, " differs from recv_counts[", rank(),
                                              "] = ", recv_counts[rank()])));
    }
    if (auto s = check_buffer(c, send, send_count, dtype, 1, "send buffer"); !s) return s;
    if (auto s = check_buffer(c, recv, extent, dtype, 1, "recv buffer"); !s) return s;
    const std::size_t elem = is_known(dtype) ? size_of(dtype) : 1;
    const detail::VLayout layout{recv_counts.data(), displs.empty() ? nullptr : displs.data(), world_size()};
    if (send != recv + layout.displ(rank()) * elem) {
      if (auto s = check_disjoint(c, send, send_count * elem, recv, extent * elem); !s) return s;
    }
    return dispatch_movement(c, [&](auto d) {
      using T = typename decltype(d)::type;
      const T* s = detail::to_ptr<const T>(send);
      T* r = detail::to_ptr<T>(recv);
      if constexpr (requires { self().all_gather_v_impl(d, s, send_count, r, layout); }) {
        return self().all_gather_v_impl(d, s, send_count, r, layout);
      } else {
        return not_implemented(c);
      }
    });
  }

  /// all_to_all with per-rank counts: `send_counts[q]` elements at offset
  /// `send_displs[q]` of `send` go to rank q, which receives them as its
  /// `recv_counts[rank()]` elements at offset `recv_displs[rank()]` of `recv`
  /// (the two counts of a pair must be equal). Empty displacements pack the
  /// blocks in rank order. `send` and `recv` must not overlap.
  [[nodiscard]] Status all_to_all_v(std::uint64_t send, std::span<const std::size_t> send_counts,
                                    std::span<const std::size_t> send_displs, std::uint64_t recv,
                                    std::span<const std::size_t> recv_counts,
                                    std::span<const std::size_t> recv_displs, DType dtype) {
    auto c = detail::CallDesc::movement(detail::Call::all_to_all_v, detail::npos, dtype);
    std::size_t send_extent = 0, recv_extent = 0;
    if (auto s = check_v(c, send_counts, send_displs, "send_counts", "send_displs", send_extent); !s) return s;
    if (auto s = check_v(c, recv_counts, recv_displs, "recv_counts", "recv_displs", recv_extent); !s) return s;
    if (auto s = check_buffer(c, send, send_extent, dtype, 1, "send buffer"); !s) return s;
    if (auto s = check_buffer(c, recv, recv_extent, dtype, 1, "recv buffer"); !s) return s;
    const std::size_t elem = is_known(dtype) ? size_of(dtype) : 1;
    if (auto s = check_disjoint(c, send, send_extent * elem, recv, recv_extent * elem); !s) return s;
    const std::size_t w = world_size();
    const detail::VLayout sl{send_counts.data(), send_displs.empty() ? nullptr : send_displs.data(), w};
    const detail::VLayout rl{recv_counts.data(), recv_displs.empty() ? nullptr : recv_displs.data(), w};
    return dispatch_movement(c, [&](auto d) {
      using T = typename decltype(d)::type;
      const T* s = detail::to_ptr<const T>(send);
      T* r = detail::to_ptr<T>(recv);
      if constexpr (requires { self().all_to_all_v_impl(d, s, sl, r, rl); }) {
        return self().all_to_all_v_impl(d, s, sl, r, rl);
      } else {
        return not_implemented(c);
      }
    });
  }

  /// send to `dest` and recv from `src` as one group (non-blocking, complete
  /// after sync(), like send and recv): the exchange a halo swap needs.
  [[nodiscard]] Status send_recv(std::uint64_t send, std::size_t send_count, std::size_t dest, std::uint64_t recv,
                                 std::size_t recv_count, std::size_t src, DType dtype, std::uint32_t tag) {
    const auto c = detail::CallDesc::p2p(detail::Call::send_recv, send_count, dtype, dest, tag);
    if (auto s = check_rank(c, dest, "dest"); !s) return s;
    if (auto s = check_rank(c, src, "src"); !s) return s;
    if (auto s = check_buffer(c, send, send_count, dtype, 1, "send buffer"); !s) return s;
    if (auto s = check_buffer(c, recv, recv_count, dtype, 1, "recv buffer"); !s) return s;
    const std::size_t elem = is_known(dtype) ? size_of(dtype) : 1;
    if (auto s = check_disjoint(c, send, send_count * elem, recv, recv_count * elem); !s) return s;
    if (auto s = group_start(); !s) return s;
    Status sent = this->send(send, send_count, dtype, dest, tag);
    Status received = sent ? this->recv(recv, recv_count, dtype, src, tag) : Status{};
    Status ended = group_end();
    if (!sent) return sent;
    if (!received) return received;
    return ended;
  }

  /// Opens a group: work submitted until the matching group_end() is issued
  /// as one batch (see group.hpp). Groups nest; the outermost end issues.
  [[nodiscard]] Status group_start() {
    if constexpr (requires { self().group_start_impl(); }) return self().group_start_impl();
    else return {};  // a backend without groups: nothing to batch
  }
  /// Closes the innermost open group; Errc::invalid_argument without one.
  [[nodiscard]] Status group_end() {
    if constexpr (requires { self().group_end_impl(); }) return self().group_end_impl();
    else return {};
  }
  /// `auto g = comm.group(); ...; g.end()`: group_start() now, group_end() at
  /// end() or destruction.
  [[nodiscard]] Group<Communicator> group() { return Group<Communicator>(*this); }

  /// Completes all pending work: outputs are valid and inputs reusable.
  [[nodiscard]] Status sync() { return self().sync_impl(); }

  /// Waits for every rank (implies sync()).
  [[nodiscard]] Status barrier() { return self().barrier_impl(); }

  /// Collective: ranks with equal `color` form a communicator ordered by
  /// (key, old rank); `no_color` gives std::nullopt to the caller.
  [[nodiscard]] Result<std::optional<Backend>> split(std::uint32_t color, std::uint32_t key) {
    return self().split_impl(color, key);
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

  /// In-place all-reduce with a compile-time op: `comm.all_reduce(std::span(v), polycoll::sum)`.
  template <detail::buffer_range R, ReduceOp Op>
  [[nodiscard]] Status all_reduce(R&& buf, op_tag<Op> op) {
    using T = detail::range_element_t<R>;
    static_assert(!std::is_const_v<T>, "polycoll::Communicator::all_reduce: the buffer is written; pass a mutable span");
    detail::check_element_type<T>();
    constexpr DType D = dtype_of_v<T>;
    static_assert(is_valid_v<D, Op>,
                  "polycoll::Communicator::all_reduce: this op is not defined for this element type "
                  "(min/max on complex, avg on integers or bool)");
    static_assert(supports_reduction_v<Backend, D, Op>,
                  "polycoll::Communicator::all_reduce: the backend does not support this (element type, op) pair");
    const std::span<T> s(buf);
    const auto c = detail::CallDesc::reduction(detail::Call::all_reduce, s.size(), D, Op);
    if (auto st = check_buffer(c, detail::to_address(s.data()), s.size(), D, 1, "buffer"); !st) return st;
    return self().all_reduce_impl(dtype_tag<D>{}, op, s.data(), s.size());
  }

  /// In-place all-reduce with a run-time op (checked at run time).
  template <detail::buffer_range R>
  [[nodiscard]] Status all_reduce(R&& buf, ReduceOp op) {
    using T = detail::range_element_t<R>;
    static_assert(!std::is_const_v<T>, "polycoll::Communicator::all_reduce: the buffer is written; pass a mutable span");
    detail::check_element_type<T>();
    const std::span<T> s(buf);
    return all_reduce(detail::to_address(s.data()), s.size(), dtype_of_v<T>, op);
  }

  /// In-place broadcast from `root`.
  template <detail::buffer_range R>
  [[nodiscard]] Status broadcast(R&& buf, std::size_t root) {
    using T = detail::range_element_t<R>;
    static_assert(!std::is_const_v<T>, "polycoll::Communicator::broadcast: the buffer is written; pass a mutable span");
    check_movable<T>();
    const std::span<T> s(buf);
    return broadcast(detail::to_address(s.data()), s.size(), dtype_of_v<T>, root);
  }

  /// all_gather: `recv.size()` must be `send.size() * world_size()`.
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status all_gather(S&& send, R&& recv) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    static_assert(std::is_same_v<TS, TR>, "polycoll::Communicator::all_gather: send and recv element types differ");
    static_assert(!std::is_const_v<TR>, "polycoll::Communicator::all_gather: recv is written; pass a mutable span");
    check_movable<TR>();
    const std::span<const TS> s(send);
    const std::span<TR> r(recv);
    const auto c = detail::CallDesc::movement(detail::Call::all_gather, s.size(), dtype_of_v<TR>);
    if (auto st = check_span_sizes(c, r.size(), s.size(), "recv.size()", "send.size()"); !st) return st;
    return all_gather(detail::to_address(s.data()), detail::to_address(r.data()), s.size(), dtype_of_v<TR>);
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
    static_assert(is_valid_v<D, Op>,
                  "polycoll::Communicator::reduce_scatter: this op is not defined for this element type "
                  "(min/max on complex, avg on integers or bool)");
    static_assert(supports_reduction_v<Backend, D, Op>,
                  "polycoll::Communicator::reduce_scatter: the backend does not support this (element type, op) pair");
    const std::span<const TS> s(send);
    const std::span<TR> r(recv);
    const auto c = detail::CallDesc::reduction(detail::Call::reduce_scatter, r.size(), D, Op);
    if (auto st = check_span_sizes(c, s.size(), r.size(), "send.size()", "recv.size()"); !st) return st;
    if (auto st = check_buffer(c, detail::to_address(s.data()), r.size(), D, world_size(), "send buffer"); !st)
      return st;
    if (auto st = check_buffer(c, detail::to_address(r.data()), r.size(), D, 1, "recv buffer"); !st) return st;
    if (auto st = check_in_block(c, detail::to_address(r.data()), detail::to_address(s.data()), r.size(), world_size(),
                                 rank(), "recv buffer", "send buffer");
        !st)
      return st;
    return self().reduce_scatter_impl(dtype_tag<D>{}, op, s.data(), r.data(), r.size());
  }

  /// reduce_scatter with a run-time op.
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status reduce_scatter(S&& send, R&& recv, ReduceOp op) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    static_assert(std::is_same_v<TS, TR>, "polycoll::Communicator::reduce_scatter: send and recv element types differ");
    static_assert(!std::is_const_v<TR>, "polycoll::Communicator::reduce_scatter: recv is written; pass a mutable span");
    detail::check_element_type<TR>();
    const std::span<const TS> s(send);
    const std::span<TR> r(recv);
    const auto c = detail::CallDesc::reduction(detail::Call::reduce_scatter, r.size(), dtype_of_v<TR>, op);
    if (auto st = check_span_sizes(c, s.size(), r.size(), "send.size()", "recv.size()"); !st) return st;
    return reduce_scatter(detail::to_address(s.data()), detail::to_address(r.data()), r.size(), dtype_of_v<TR>, op);
  }

  /// Non-blocking typed send.
  template <detail::buffer_range R>
  [[nodiscard]] Status send(R&& buf, std::size_t dest, std::uint32_t tag) {
    using T = detail::range_value_t<R>;
    check_movable<T>();
    const std::span<const T> s(buf);
    return send(detail::to_address(s.data()), s.size(), dtype_of_v<T>, dest, tag);
  }

  /// Non-blocking typed receive.
  template <detail::buffer_range R>
  [[nodiscard]] Status recv(R&& buf, std::size_t src, std::uint32_t tag) {
    using T = detail::range_element_t<R>;
    static_assert(!std::is_const_v<T>, "polycoll::Communicator::recv: the buffer is written; pass a mutable span");
    check_movable<T>();
    const std::span<T> s(buf);
    return recv(detail::to_address(s.data()), s.size(), dtype_of_v<T>, src, tag);
  }

  /// Typed reduce with a compile-time op: on the root `recv.size()` must be
  /// `send.size()`; elsewhere `recv` is not used (pass an empty span).
  template <detail::buffer_range S, detail::buffer_range R, ReduceOp Op>
  [[nodiscard]] Status reduce(S&& send, R&& recv, op_tag<Op>, std::size_t root) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    check_pair<TS, TR>("reduce");
    constexpr DType D = dtype_of_v<TR>;
    static_assert(is_valid_v<D, Op>,
                  "polycoll::Communicator::reduce: this op is not defined for this element type "
                  "(min/max on complex, avg on integers or bool)");
    static_assert(supports_reduction_v<Backend, D, Op>,
                  "polycoll::Communicator::reduce: the backend does not support this (element type, op) pair");
    return reduce(send, recv, Op, root);
  }

  /// Typed reduce with a run-time op.
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status reduce(S&& send, R&& recv, ReduceOp op, std::size_t root) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    check_pair<TS, TR>("reduce");
    const std::span<const TS> s(send);
    const std::span<TR> r(recv);
    auto c = detail::CallDesc::reduction(detail::Call::reduce, s.size(), dtype_of_v<TR>, op);
    c.root = root;
    if (rank() == root) {
      if (auto st = check_span_sizes(c, r.size(), s.size(), "recv.size()", "send.size()", 1); !st) return st;
    }
    return reduce(detail::to_address(s.data()), detail::to_address(r.data()), s.size(), dtype_of_v<TR>, op, root);
  }

  /// Typed gather: on the root `recv.size()` must be `send.size() * world_size()`.
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status gather(S&& send, R&& recv, std::size_t root) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    check_pair<TS, TR>("gather");
    check_movable<TR>();
    const std::span<const TS> s(send);
    const std::span<TR> r(recv);
    const auto c = detail::CallDesc::rooted(detail::Call::gather, s.size(), dtype_of_v<TR>, root);
    if (rank() == root) {
      if (auto st = check_span_sizes(c, r.size(), s.size(), "recv.size()", "send.size()"); !st) return st;
    }
    return gather(detail::to_address(s.data()), detail::to_address(r.data()), s.size(), dtype_of_v<TR>, root);
  }

  /// Typed scatter: on the root `send.size()` must be `recv.size() * world_size()`.
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status scatter(S&& send, R&& recv, std::size_t root) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    check_pair<TS, TR>("scatter");
    check_movable<TR>();
    const std::span<const TS> s(send);
    const std::span<TR> r(recv);
    const auto c = detail::CallDesc::rooted(detail::Call::scatter, r.size(), dtype_of_v<TR>, root);
    if (rank() == root) {
      if (auto st = check_span_sizes(c, s.size(), r.size(), "send.size()", "recv.size()"); !st) return st;
    }
    return scatter(detail::to_address(s.data()), detail::to_address(r.data()), r.size(), dtype_of_v<TR>, root);
  }

  /// Typed all_to_all: `send.size() == recv.size()`, a multiple of `world_size()`.
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status all_to_all(S&& send, R&& recv) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    check_pair<TS, TR>("all_to_all");
    check_movable<TR>();
    const std::span<const TS> s(send);
    const std::span<TR> r(recv);
    const std::size_t w = std::max<std::size_t>(world_size(), 1);
    const auto c = detail::CallDesc::movement(detail::Call::all_to_all, r.size() / w, dtype_of_v<TR>);
    if (s.size() != r.size() || r.size() % w != 0) {
      return tl::unexpected(error(Errc::invalid_argument, c,
                                  detail::cat("send.size() ", s.size(), " and recv.size() ", r.size(),
                                              " must be equal and a multiple of world_size ", w)));
    }
    return all_to_all(detail::to_address(s.data()), detail::to_address(r.data()), r.size() / w, dtype_of_v<TR>);
  }

  /// Typed all_gather_v: `counts[q]` elements from rank q at `displs[q]` of
  /// `recv` (empty `displs`: packed); `send.size()` must be `counts[rank()]`
  /// and `recv` must hold every block.
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status all_gather_v(S&& send, R&& recv, std::span<const std::size_t> counts,
                                    std::span<const std::size_t> displs = {}) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    check_pair<TS, TR>("all_gather_v");
    check_movable<TR>();
    const std::span<const TS> s(send);
    const std::span<TR> r(recv);
    const auto c = detail::CallDesc::movement(detail::Call::all_gather_v, s.size(), dtype_of_v<TR>);
    std::size_t extent = 0;
    if (auto st = check_v(c, counts, displs, "counts", "displs", extent); !st) return st;
    if (auto st = check_extent(c, r.size(), extent, "recv"); !st) return st;
    return all_gather_v(detail::to_address(s.data()), s.size(), detail::to_address(r.data()), counts, displs,
                        dtype_of_v<TR>);
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
    check_pair<TS, TR>("all_to_all_v");
    check_movable<TR>();
    const std::span<const TS> s(send);
    const std::span<TR> r(recv);
    const auto c = detail::CallDesc::movement(detail::Call::all_to_all_v, detail::npos, dtype_of_v<TR>);
    std::size_t send_extent = 0, recv_extent = 0;
    if (auto st = check_v(c, send_counts, send_displs, "send_counts", "send_displs", send_extent); !st) return st;
    if (auto st = check_v(c, recv_counts, recv_displs, "recv_counts", "recv_displs", recv_extent); !st) return st;
    if (auto st = check_extent(c, s.size(), send_extent, "send"); !st) return st;
    if (auto st = check_extent(c, r.size(), recv_extent, "recv"); !st) return st;
    return all_to_all_v(detail::to_address(s.data()), send_counts, send_displs, detail::to_address(r.data()),
                        recv_counts, recv_displs, dtype_of_v<TR>);
  }

  /// Typed send_recv: `send` to `dest` and `recv` from `src`, as one group.
  template <detail::buffer_range S, detail::buffer_range R>
  [[nodiscard]] Status send_recv(S&& send, std::size_t dest, R&& recv, std::size_t src, std::uint32_t tag) {
    using TS = detail::range_value_t<S>;
    using TR = detail::range_element_t<R>;
    check_pair<TS, TR>("send_recv");
    check_movable<TR>();
    const std::span<const TS> s(send);
    const std::span<TR> r(recv);
    return send_recv(detail::to_address(s.data()), s.size(), dest, detail::to_address(r.data()), r.size(), src,
                     dtype_of_v<TR>, tag);
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
      if (self().moved_from_impl()) return detail::moved_from_error(c, Backend::backend_name);
    }
    return detail::call_error(code, c, rank(), world_size(), Backend::backend_name, what, native);
  }

 private:
  Backend& self() noexcept { return static_cast<Backend&>(*this); }
  const Backend& self() const noexcept { return static_cast<const Backend&>(*this); }

  template <class T>
  static constexpr void check_movable() {
    detail::check_element_type<T>();
    static_assert(supports_dtype_v<Backend, dtype_of_v<T>>,
                  "polycoll::Communicator: the backend cannot move this element type");
  }

  Status check_rank(const detail::CallDesc& c, std::size_t r, const char* what) const {
    const std::size_t w = world_size();
    if (r >= w) {
      return tl::unexpected(
          error(Errc::invalid_argument, c, detail::cat(what, ' ', r, " out of range [0, ", w, ')')));
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
      return tl::unexpected(error(Errc::invalid_argument, c,
                                  detail::cat(what, " size overflows: count ", count, " x ",
                                              std::max<std::size_t>(blocks, 1), " x ", elem, " bytes")));
    }
    return tl::unexpected(error(Errc::invalid_argument, c, detail::cat(what, " is null with count > 0")));
  }

  // Send and recv element types of a typed call agree, and recv is writable.
  template <class TS, class TR>
  static constexpr void check_pair(const char*) {
    static_assert(std::is_same_v<TS, std::remove_const_t<TR>>,
                  "polycoll::Communicator: send and recv element types differ");
    static_assert(!std::is_const_v<TR>, "polycoll::Communicator: recv is written; pass a mutable span");
    detail::check_element_type<std::remove_const_t<TR>>();
  }

  Status check_extent(const detail::CallDesc& c, std::size_t have, std::size_t need, const char* what) const {
    if (have < need) [[unlikely]] {
      return tl::unexpected(error(Errc::invalid_argument, c,
                                  detail::cat(what, ".size() is ", have, ", the counts and displacements need ",
                                              need)));
    }
    return {};
  }

  // `big` must be `small` x blocks (world_size by default).
  Status check_span_sizes(const detail::CallDesc& c, std::size_t big, std::size_t small, const char* big_name,
                          const char* small_name, std::size_t blocks = 0) const {
    const std::size_t w = blocks != 0 ? blocks : std::max<std::size_t>(world_size(), 1);
    if (small > std::numeric_limits<std::size_t>::max() / w || big != small * w) {
      return tl::unexpected(error(Errc::invalid_argument, c,
                                  detail::cat(big_name, " is ", big, ", expected ", small_name,
                                              " x world_size = ", small, " x ", w)));
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
    return tl::unexpected(error(Errc::invalid_argument, c,
                                detail::cat(a_name, " and ", b_name,
                                            " overlap (other than in the documented in-place form)")));
  }

  // The counts and displacements of a v-collective; `extent` gets the
  // elements the buffer must hold.
  Status check_v(const detail::CallDesc& c, std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                 const char* counts_name, const char* displs_name, std::size_t& extent) const {
    std::size_t bad = 0;
    if (const char* why = detail::check_layout(counts, displs, world_size(), extent, bad)) [[unlikely]] {
      return tl::unexpected(error(Errc::invalid_argument, c,
                                  detail::cat(counts_name, " (", counts.size(), ") / ", displs_name, " (",
                                              displs.size(), ") ", why, " (world_size ", world_size(),
                                              ", at rank ", bad, ')')));
    }
    return {};
  }

  // A backend written against the seed surface alone: the newer calls are
  // Errc::unsupported on it (AnyCommunicator still holds it).
  Status not_implemented(const detail::CallDesc& c) const {
    return tl::unexpected(error(Errc::unsupported, c, "the backend does not implement this call"));
  }

  Error unknown_dtype(const detail::CallDesc& c) const {
    return error(Errc::invalid_argument, c, detail::cat("unknown DType value ", detail::dtype_text(c.dtype)));
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
            return tl::unexpected(error(Errc::unsupported, c, "the backend cannot move this dtype"));
          }
        },
        [&]() -> Status { return tl::unexpected(unknown_dtype(c)); });
  }

  // Run-time (DType, ReduceOp) -> tags, then validity, then the capability trait, then `f(d, o)`.
  template <class F>
  Status dispatch_reduction(const detail::CallDesc& c, F&& f) {
    return visit_dtype(
        c.dtype,
        [&](auto d) -> Status {
          return visit_op(
              c.op,
              [&](auto o) -> Status {
                constexpr DType D = decltype(d)::value;
                constexpr ReduceOp Op = decltype(o)::value;
                if constexpr (!is_valid_v<D, Op>) {
                  return tl::unexpected(error(Errc::invalid_argument, c,
                                              detail::cat("op ", name(Op), " is not defined for dtype ", name(D))));
                } else if constexpr (!supports_reduction_v<Backend, D, Op>) {
                  return tl::unexpected(error(Errc::unsupported, c, "the backend does not support this (dtype, op)"));
                } else {
                  return f(d, o);
                }
              },
              [&]() -> Status {
                return tl::unexpected(
                    error(Errc::invalid_argument, c, detail::cat("unknown ReduceOp value ", detail::op_text(c.op))));
              });
        },
        [&]() -> Status { return tl::unexpected(unknown_dtype(c)); });
  }
};

/// Satisfied by the backends: types deriving from `Communicator<B>` that name themselves (`B::backend_name`).
template <class B>
concept CommunicatorBackend = std::is_base_of_v<Communicator<B>, B> && requires { B::backend_name; };

}  // namespace polycoll
