#pragma once
/// @file backends/threads/state.hpp
/// What a Threads world shares: each rank's arrival lines, published
/// buffers and mailbox (detail::threads::RankState), the world itself
/// (World: its ranks, scratch slots and abort), and the queued
/// point-to-point messages. Internal to backends/threads.hpp.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <polycoll/communicator.hpp>
#include <polycoll/detail/call.hpp>
#include <polycoll/detail/layout.hpp>
#include <polycoll/detail/send_check.hpp>
#include <polycoll/detail/std_parts.hpp>
#include <polycoll/detail/wait.hpp>
#include <polycoll/dtype.hpp>
#include <polycoll/error.hpp>
#include <polycoll/kernels/reduce.hpp>
#include <polycoll/reduce_op.hpp>

namespace polycoll {

namespace detail::threads {

/// Messages up to this many bytes (per rank contribution) take the latency path.
inline constexpr std::size_t small_bytes = 16 * 1024;
/// Large-path slices start on this boundary so two ranks never write one cache line.
inline constexpr std::size_t slice_align = 64;

/// Sends up to this many bytes are copied at post (detail/send_check.hpp).
inline constexpr std::size_t eager_bytes = polycoll::detail::eager_bytes;

struct PendingSend {
  // User-provided, so that emplace_back() does not zero `eager` first.
  PendingSend() noexcept {}  // NOLINT(modernize-use-equals-default)
  const void* ptr = nullptr;
  std::size_t bytes = 0;
  std::size_t src = 0;
  CallDesc call;
  bool copied = false;  // the bytes are in `eager`, not at `ptr`
  alignas(16) std::byte eager[eager_bytes];

  const void* data() const noexcept { return copied ? static_cast<const void*>(eager) : ptr; }

  // The queued send `from`, copied out of its mailbox: its envelope and the
  // bytes it carries (at most eager_bytes), not the whole eager buffer, so
  // that the mailbox lock is held for as short a time as possible.
  void take(const PendingSend& from) noexcept {
    ptr = from.ptr;
    bytes = from.bytes;
    src = from.src;
    call = from.call;
    copied = from.copied;
    if (copied) copy_bytes(eager, from.eager, bytes);
  }

 private:
  static void copy_bytes(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
    if (n != 0) std::memcpy(dst, src, n);
  }
};

/// The lock of a rank's mailbox. It is held for a few dozen instructions (a
/// scan of the queue, a push, a copy of at most eager_bytes), so a thread
/// that finds it taken spins a little before it sleeps. std::mutex sleeps at
/// once: in a 2-rank exchange the sender and the receiver meet at the
/// receiver's mailbox every time, and the futex sleep and wake-up that
/// followed cost more than the rest of the send and receive together
/// (docs/benchmarks.md, "Point-to-point"). After `spin` tries it sleeps on
/// the lock word, so a rank whose holder was preempted (more ranks than
/// cores) does not burn its core.
class MailboxLock {
 public:
  void lock() noexcept {
    if (try_lock()) [[likely]] return;
    for (unsigned i = 0; i < spin; ++i) {
      polycoll::detail::cpu_relax();
      if (state_.load(std::memory_order_relaxed) == free && try_lock()) return;
    }
    // `contended` tells unlock() that a thread may sleep on the word.
    while (state_.exchange(contended, std::memory_order_acquire) != free) {
      state_.wait(contended, std::memory_order_relaxed);
    }
  }
  bool try_lock() noexcept {
    std::uint32_t expected = free;
    return state_.compare_exchange_strong(expected, held, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void unlock() noexcept {
    if (state_.exchange(free, std::memory_order_release) == contended) state_.notify_one();
  }

 private:
  static constexpr std::uint32_t free = 0, held = 1, contended = 2;
  static constexpr unsigned spin = 128;
  std::atomic<std::uint32_t> state_{free};
};

// A posted receive (`peer` any_source, `tag` any_tag: wildcards) matches a
// send from `src` with `tag`.
constexpr bool matches(std::size_t want_src, std::uint32_t want_tag, std::size_t src, std::uint32_t tag) noexcept {
  return (want_src == any_source || want_src == src) && (want_tag == any_tag || want_tag == tag);
}
struct PendingRecv {
  void* ptr;
  std::size_t bytes;
  CallDesc call;
};

struct World;

// memcpy, except that an empty copy may have null pointers (memcpy's may not).
inline void copy(void* dst, const void* src, std::size_t bytes) noexcept {
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

// copy(), except that dst == src (an in-place block) copies nothing.
inline void move(void* dst, const void* src, std::size_t bytes) noexcept {
  if (dst != src) copy(dst, src, bytes);
}

// The n source pointers of one reduction: inline for the usual world sizes.
// Untyped, as the kernels' untyped combine_n takes them (see Reduction).
class Sources {
 public:
  // inline_ is left uninitialised on purpose: every slot below n is written before use.
  explicit Sources(std::size_t n) : ptr_(n <= inline_n ? inline_ : (heap_.resize(n), heap_.data())) {}
  const void*& operator[](std::size_t i) noexcept { return ptr_[i]; }
  const void* const* data() const noexcept { return ptr_; }

 private:
  static constexpr std::size_t inline_n = 16;
  const void* inline_[inline_n];
  std::vector<const void*> heap_;
  const void** ptr_;
};

// What the reduction collectives need of one (dtype, op) pair, as run-time
// values: their bodies are compiled once, not once per pair (72 pairs, each
// reached by the run-time dispatch of the seed surface and
// AnyCommunicator); only the kernels are compiled per pair.
struct Reduction {
  DType dtype;
  ReduceOp op;
  std::size_t size;  // bytes per element
  // dst[i] = a[i] OP b[i] (Avg: the Sum step), kernels::combine.
  void (*combine)(void* dst, const void* a, const void* b, std::size_t n) noexcept;
  // kernels::combine_n: the rank-order fold of k sources, divided for Avg.
  void (*fold)(void* dst, const void* const* srcs, std::size_t k, std::size_t n, std::size_t divisor) noexcept;
};

template <DType D, ReduceOp Op>
void combine_erased(void* dst, const void* a, const void* b, std::size_t n) noexcept {
  using T = typename dtype_tag<D>::type;
  kernels::combine(dtype_tag<D>{}, op_tag<Op>{}, static_cast<T*>(dst), static_cast<const T*>(a),
                   static_cast<const T*>(b), n);
}

template <DType D, ReduceOp Op>
void fold_erased(void* dst, const void* const* srcs, std::size_t k, std::size_t n, std::size_t divisor) noexcept {
  kernels::combine_n(dtype_tag<D>{}, op_tag<Op>{}, dst, srcs, k, n, divisor);
}

/// The Reduction of the valid pair (D, Op).
template <DType D, ReduceOp Op>
inline constexpr Reduction reduction_of = {D, Op, size_of(D), &combine_erased<D, Op>, &fold_erased<D, Op>};

/// Bytes a latency-path contribution may carry inside an arrival line.
inline constexpr std::size_t inline_bytes = 56;

/// One cache line a rank writes and its peers read: the number of the phase
/// this rank arrived at, and up to `inline_bytes` of data for that phase, so
/// that one line transfer carries both the signal and a small message.
struct alignas(64) Line {
  std::atomic<std::uint32_t> phase{0};
  alignas(8) std::byte data[inline_bytes] = {};
};
static_assert(sizeof(Line) == 64);

/// With the consistency check on, the last bytes of a line's data carry the
/// arriving call's packed fingerprint (detail::PackedFingerprint), so peers
/// compare fingerprints out of the line they read anyway, and contributions
/// up to this many bytes travel in the line (more go through the scratch).
inline constexpr std::size_t checked_inline_bytes = inline_bytes - detail::packed_fingerprint_bytes;
static_assert(checked_inline_bytes % 8 == 0, "the fingerprint slot stays 8-byte aligned");

/// Phase counters wrap; ranks are never more than two phases apart.
constexpr bool reached(std::uint32_t v, std::uint32_t p) noexcept { return static_cast<std::int32_t>(v - p) >= 0; }

struct alignas(64) RankState {
  // Arrival lines, by phase parity: phase p is announced in line[p & 1].
  // A rank can be at most one phase ahead of the slowest peer it waits for,
  // so line[p & 1] holds p or p - 2, and its data (written before announcing
  // p) is read by peers before they announce p + 1, hence before this rank
  // can overwrite it at p + 2.
  Line line[2];

  // Published for the collective in progress; read by peers after a phase.
  alignas(64) const void* send = nullptr;
  void* recv = nullptr;
  std::uint32_t color = 0;
  std::uint32_t key = 0;
  std::shared_ptr<World> split_result;
  std::size_t send_count = 0;  // all_gather_v: this rank's contribution
  VLayout send_layout;         // all_to_all_v: this rank's send blocks
  CallDesc current[2] = {};  // a mismatched collective, by its first phase's parity (the check's message)

  // Owned by this rank's submitting thread (under `submit`).
  std::mutex submit;
  std::uint32_t phases = 0;  // the last phase this rank announced
  std::uint64_t seq = 0;

  // Point-to-point: sends addressed to this rank, and recvs it posted, not yet matched.
  MailboxLock mailbox;
  std::vector<PendingSend> sends;
  std::vector<PendingRecv> recvs;
  SendLedger ledger;  // the consistency check's hashes of this rank's sends (check on)
  alignas(64) std::atomic<std::uint32_t> p2p_pending{0};  // this rank's posted, incomplete ops
  std::mutex error_mutex;
  std::optional<Error> p2p_error;
  std::atomic<std::size_t> groups{0};  // open groups (p2p is posted as submitted: nothing to batch)
  // This rank's last calls (Options::flight_record_size; null when 0). Peers
  // read it to say what a rank they wait for is doing.
  std::unique_ptr<FlightRecorder> flight;
};

struct World {
  std::size_t n;
  Options options;
  bool check;  // Options::check_consistency or POLYCOLL_CHECK=1
  unsigned spin;
  alignas(64) std::atomic<bool> aborted{false};
  std::atomic<bool> abort_claimed{false};  // the first abort() wins and writes the cause
  std::string abort_cause;                 // written once, before `aborted` is released
  std::unique_ptr<RankState[]> ranks;
  std::unique_ptr<std::byte[]> scratch;
  // The worlds split() made from this one (and, through them, theirs), for
  // Threads::run: a failed rank aborts the whole tree, so that a rank waiting
  // in a sub-communicator returns too. `tree_cause` is set once the tree was
  // aborted: a world split from it later is aborted as it is adopted.
  std::mutex family;
  std::vector<std::weak_ptr<World>> children;
  std::optional<std::string> tree_cause;

  /// Why a world of `size` ranks cannot be allocated, or nullptr. Every size
  /// derived from the rank count is checked here, before any allocation:
  /// `new RankState[size]` of an over-aligned type does not reliably throw
  /// when size * sizeof(RankState) overflows (GCC 12 allocates a wrapped,
  /// small block), and the scratch size would wrap silently.
  static const char* too_large(std::size_t size) noexcept {
    std::size_t bytes = 0;
    if (__builtin_mul_overflow(size, sizeof(RankState), &bytes) || bytes > PTRDIFF_MAX) return "its rank states";
    if (__builtin_mul_overflow(size, 2 * small_bytes, &bytes) || bytes > PTRDIFF_MAX) return "its scratch slots";
    return nullptr;
  }

  /// Precondition: too_large(size) is nullptr.
  World(std::size_t size, Options opt)
      : n(size),
        options(opt),
        check(opt.check_consistency || detail::check_from_environment()),
        spin(size <= std::max(1u, std::thread::hardware_concurrency()) ? 20000u : 200u),
        ranks(new RankState[size]),
        scratch(new std::byte[size * 2 * small_bytes]) {
    // Touch the scratch once now, so that a collective never pays for a page's
    // first touch (docs/backends.md, "Memory").
    std::memset(scratch.get(), 0, size * 2 * small_bytes);
    for (std::size_t r = 0; r < size; ++r) {
      ranks[r].sends.reserve(16);
      ranks[r].recvs.reserve(16);
      ranks[r].flight = FlightRecorder::make(opt.flight_record_size);
    }
  }

  /// Bytes of latency-path data a line carries (the fingerprint takes the
  /// rest with the check on).
  std::size_t inline_limit() const noexcept { return check ? checked_inline_bytes : inline_bytes; }

  /// Rank r's latency-path scratch for phase parity `parity` (small_bytes).
  std::byte* scratch_of(std::size_t r, unsigned parity) const noexcept {
    return scratch.get() + (2 * r + parity) * small_bytes;
  }

  // Aborts this world and every world split from it, now and later (see
  // `children`).
  void abort_tree(const std::string& cause) noexcept {
    std::vector<std::shared_ptr<World>> alive;
    {
      std::lock_guard lock(family);
      try {
        if (!tree_cause) tree_cause = cause;
        for (const auto& c : children) {
          if (auto w = c.lock()) alive.push_back(std::move(w));
        }
      } catch (const std::bad_alloc&) {
        // Out of memory for the list: the children reached so far still abort.
      }
    }
    try {
      abort(std::string(cause));
    } catch (const std::bad_alloc&) {
      abort(std::string{});
    }
    for (const auto& w : alive) w->abort_tree(cause);
  }

  // Registers `child`, just split from this world; aborts it at once when
  // this tree was aborted before. Returns false when out of memory (then the
  // child is not registered: split() fails).
  bool adopt(const std::shared_ptr<World>& child) noexcept {
    std::optional<std::string> cause;
    {
      std::lock_guard lock(family);
      try {
        std::erase_if(children, [](const std::weak_ptr<World>& c) { return c.expired(); });
        children.push_back(child);
        cause = tree_cause;
      } catch (const std::bad_alloc&) {
        return false;
      }
    }
    if (cause) child->abort_tree(*cause);
    return true;
  }

  // Everyone waiting anywhere in this world wakes up and returns Errc::aborted,
  // with `cause` in the message. Only the first abort records its cause (the
  // later ones are consequences); it is written before `aborted` is released,
  // so whoever sees `aborted` (acquire) may read it.
  void abort(std::string&& cause) noexcept {
    if (abort_claimed.exchange(true, std::memory_order_acq_rel)) return;
    abort_cause = std::move(cause);
    aborted.store(true, std::memory_order_release);
    for (std::size_t r = 0; r < n; ++r) {
      for (Line& l : ranks[r].line) {
        l.phase.fetch_add(1u << 30, std::memory_order_acq_rel);
        l.phase.notify_all();
      }
    }
    for (std::size_t r = 0; r < n; ++r) {
      ranks[r].p2p_pending.fetch_add(1u << 30, std::memory_order_acq_rel);
      ranks[r].p2p_pending.notify_all();
    }
  }
};

}  // namespace detail::threads

}  // namespace polycoll
