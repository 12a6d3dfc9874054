#pragma once
// Process-wide state of the Mpi backend: the cached user MPI_Ops (one per
// (DType, ReduceOp) pair that needs polycoll's reduction unit), the hook that
// frees them when MPI is finalised, the finalised flag every call reads, and
// the lock that serialises MPI when it provides less than MPI_THREAD_MULTIPLE,
// and the submission lock type. Internal to backends/mpi.hpp.

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include <mpi.h>

#include <polycoll/backends/mpi/types.hpp>
#include <polycoll/detail/std_parts.hpp>
#include <polycoll/dtype.hpp>
#include <polycoll/kernels/reduce.hpp>
#include <polycoll/numeric.hpp>
#include <polycoll/reduce_op.hpp>

namespace polycoll::detail::mpi {

inline constexpr std::size_t op_slots = dtype_count * reduce_op_count;

/// Between fruitless polls: spin a little, then yield, then sleep briefly so
/// that a peer sharing the core runs (MPICH busy-polls too).
inline void back_off(unsigned& idle) noexcept {
  if (++idle <= 64) return;
  if (idle < 4096) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

/// The lock that serialises submissions to one communicator (BasicLockable,
/// for std::unique_lock). Taken with one atomic exchange and released with a
/// plain release store: unlike std::mutex, whose unlock is a locked
/// read-modify-write, nothing after the MPI call waits for the store buffer,
/// which still holds MPI's writes to the peer's shared-memory queue, so the
/// lock adds nothing measurable to a small call where std::mutex added a
/// tenth (docs/mpi.md, "Per-call cost"). Nobody is woken: a waiter polls with
/// back_off, so under contention it takes the lock up to one back-off sleep
/// after its release, which is short next to the MPI call the holder makes.
class SubmitLock {
 public:
  void lock() noexcept {
    if (!held_.exchange(true, std::memory_order_acquire)) [[likely]] return;
    unsigned idle = 0;
    do {
      while (held_.load(std::memory_order_relaxed)) back_off(idle);
    } while (held_.exchange(true, std::memory_order_acquire));
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> held_{false};
};

struct ProcessState {
  std::mutex mutex;  // creation and release of the ops and of the finalize hook
  std::atomic<bool> hooked{false};
  std::atomic<bool> finalized{false};  // set as MPI_Finalize begins (or was seen to have run)
  int keyval = MPI_KEYVAL_INVALID;
  std::array<std::atomic<bool>, op_slots> ready{};
  std::array<MPI_Op, op_slots> ops{};
  SubmitLock serial;  // every MPI call, when the thread level is below MPI_THREAD_MULTIPLE
  // The shared-memory windows not yet freed (the all_reduce windows,
  // backends/mpi/shm.hpp, and the status boards, backends/mpi/board.hpp), by
  // id in creation order: those of communicators still alive at MPI_Finalize,
  // and those whose ranks did not meet at destruction. Every rank of a
  // window holds it here or none does, so the finalize hook frees them all
  // collectively, in the order the ranks created them.
  std::uint64_t next_window = 0;
  std::vector<std::pair<std::uint64_t, MPI_Win>> windows;
};

inline ProcessState& process() noexcept {
  static ProcessState state;
  return state;
}

/// Frees every cached user op. Idempotent; MPI must still be usable.
inline void release_ops() noexcept {
  auto& p = process();
  std::lock_guard lock(p.mutex);
  for (std::size_t i = 0; i < op_slots; ++i) {
    if (p.ready[i].load(std::memory_order_acquire)) {
      MPI_Op_free(&p.ops[i]);
      p.ready[i].store(false, std::memory_order_release);
    }
  }
}

// Delete callback of the attribute on MPI_COMM_SELF: MPI_Finalize deletes it
// first thing, while MPI is still usable, so the ops are freed even when the
// user (not polycoll::mpi::Environment) calls MPI_Finalize.
inline int on_finalize(MPI_Comm, int, void*, void*) {
  auto& p = process();
  p.finalized.store(true, std::memory_order_release);
  release_ops();
  std::lock_guard lock(p.mutex);
  for (auto& [id, win] : p.windows) MPI_Win_free(&win);
  p.windows.clear();
  if (p.keyval != MPI_KEYVAL_INVALID) MPI_Comm_free_keyval(&p.keyval);
  p.keyval = MPI_KEYVAL_INVALID;
  return MPI_SUCCESS;
}

/// True when MPI_Init has run and MPI_Finalize has not begun.
inline bool mpi_usable() noexcept {
  if (process().finalized.load(std::memory_order_acquire)) return false;
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init != 0 && fin == 0;
}

/// Installs the finalize hook once per process (MPI must be initialised).
inline int install_hook() noexcept {
  auto& p = process();
  if (p.hooked.load(std::memory_order_acquire)) return MPI_SUCCESS;
  std::lock_guard lock(p.mutex);
  if (p.hooked.load(std::memory_order_relaxed)) return MPI_SUCCESS;
  int rc = MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &on_finalize, &p.keyval, nullptr);
  if (rc != MPI_SUCCESS) return rc;
  rc = MPI_Comm_set_attr(MPI_COMM_SELF, p.keyval, nullptr);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free_keyval(&p.keyval);
    p.keyval = MPI_KEYVAL_INVALID;
    return rc;
  }
  p.hooked.store(true, std::memory_order_release);
  return MPI_SUCCESS;
}

// ------------------------------------------------------------ shared-memory windows
// What the all_reduce windows (shm.hpp, node_shm.hpp) and the status board
// (board.hpp) share: their layout, the finalize hook's list, the teardown.

/// False when this process's environment says POLYCOLL_MPI_SHM=0: the
/// all_reduce windows (shm.hpp, node_shm.hpp) are then not made, and every
/// all_reduce goes through MPI (or the 2-rank point-to-point algorithms).
/// A test aid and an escape hatch (docs/mpi.md). The ranks agree on it when
/// a communicator first needs a window: one rank's 0 turns it off for all.
inline bool shm_allowed() noexcept {
  const char* v = std::getenv("POLYCOLL_MPI_SHM");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

/// The all_reduce algorithm POLYCOLL_MPI_ALL_REDUCE forces (docs/mpi.md,
/// "Which algorithm serves a call"): a test aid, so that the tests run each
/// path at every size and world size it serves, and a way to compare them.
/// Where the forced one cannot serve a call (a window across nodes, the
/// exchange above its stack buffer or at 3 or more ranks, the halving at 3
/// or more, the nonblocking policy or op_timeout, a pair MPI reduces with
/// its predefined op only), the usual choice does.
/// `invalid`: a value that names none of them (the first collective that
/// would agree on it fails on every rank, naming it: BasicMpi::make_pair_comm).
enum class ForcedAllReduce : int { none = 0, mpi = 1, window = 2, exchange = 3, halving = 4, invalid = 5 };

/// POLYCOLL_MPI_ALL_REDUCE of this process: unset, empty or "auto" is none;
/// "mpi", "window", "exchange", "halving"; anything else is invalid.
inline ForcedAllReduce forced_all_reduce_from_environment() noexcept {
  const char* v = std::getenv("POLYCOLL_MPI_ALL_REDUCE");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return ForcedAllReduce::none;
  if (std::strcmp(v, "mpi") == 0) return ForcedAllReduce::mpi;
  if (std::strcmp(v, "window") == 0) return ForcedAllReduce::window;
  if (std::strcmp(v, "exchange") == 0) return ForcedAllReduce::exchange;
  if (std::strcmp(v, "halving") == 0) return ForcedAllReduce::halving;
  return ForcedAllReduce::invalid;
}

/// POLYCOLL_MPI_NODE_SIZE of this process, a test aid (docs/mpi.md, "Across
/// nodes"): the all_reduce takes ranks k*i .. k*i+k-1 of a communicator for
/// one node, whatever node they run on, so that the hierarchical path runs
/// and is checked on one machine. Unset or empty: 0 (the real nodes); a
/// decimal number from 1 to 2^30: that k; anything else: -1 (invalid: the
/// first collective that would agree on it, the one that makes polycoll's
/// duplicate (BasicMpi::make_pair_comm), fails on every rank, naming it).
inline long fake_node_size_from_environment() noexcept {
  const char* v = std::getenv("POLYCOLL_MPI_NODE_SIZE");
  if (v == nullptr || *v == '\0') return 0;
  long long k = 0;
  for (const char* p = v; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9' || k > (1LL << 30)) return -1;
    k = k * 10 + (*p - '0');
  }
  return k >= 1 && k <= (1LL << 30) ? static_cast<long>(k) : -1;
}

/// One poll of MPI's progress engine: MPI_Iprobe on `comm`, a private dup
/// that no message of the user's reaches, so it consumes nothing.
inline void probe_progress(MPI_Comm comm) noexcept {
  int flag = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, MPI_STATUS_IGNORE);
}

/// The first cache-line boundary at or after `p`. Every rank aligns its part
/// of a shared window so, and lands on the same byte in every mapping (the
/// offset within a page is the same); the slack is at most 63 bytes.
inline std::byte* align64(void* p) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  return static_cast<std::byte*>(p) + ((64 - a % 64) % 64);
}

/// True when `win` reports MPI_WIN_UNIFIED: then C++ atomics in its memory
/// synchronise the ranks, which both windows need.
inline bool unified(MPI_Win win) noexcept {
  int* model = nullptr;
  int flag = 0;
  return MPI_Win_get_attr(win, MPI_WIN_MODEL, &model, &flag) == MPI_SUCCESS && flag != 0 &&
         *model == MPI_WIN_UNIFIED;
}

/// Puts `win` on the finalize hook's list and returns its id there.
inline std::uint64_t register_window(MPI_Win win) {
  auto& p = process();
  std::lock_guard lock(p.mutex);
  const std::uint64_t id = p.next_window++;
  p.windows.emplace_back(id, win);
  return id;
}

/// Takes window `id` off the finalize hook's list and frees it (collective
/// over its ranks: each calls this in its own teardown).
inline void free_registered(std::uint64_t id, MPI_Win& win) noexcept {
  {
    auto& p = process();
    std::lock_guard lock(p.mutex);
    std::erase_if(p.windows, [id](const auto& e) { return e.first == id; });
  }
  MPI_Win_free(&win);
}

/// The teardown agreement of a shared window's `k` ranks on one word of it
/// (zero at first), so that its collective MPI_Win_free never waits past
/// `bound` for a rank that does not come. Each arriving rank adds one; the
/// rank that makes it k, and every rank that sees k, returns true (free the
/// window now); a rank still waiting when the bound expires withdraws by
/// setting `abandoned` while the count is below k (one compare-exchange),
/// and every rank that sees that bit returns false (leave the window to the
/// finalize hook). The count never changes once it is k, so every rank
/// decides alike. Past the first polls `progress()` runs between them.
template <class Progress>
bool meet(std::atomic<std::uint32_t>& word, std::uint32_t k, std::chrono::milliseconds bound,
          Progress&& progress) noexcept {
  constexpr std::uint32_t abandoned = 1u << 31;
  std::uint32_t v = word.fetch_add(1, std::memory_order_acq_rel) + 1;
  const auto until = std::chrono::steady_clock::now() + bound;
  unsigned idle = 0;
  while ((v & abandoned) == 0 && v != k) {
    if (std::chrono::steady_clock::now() >= until) {
      if (word.compare_exchange_strong(v, v | abandoned, std::memory_order_acq_rel)) return false;
      continue;  // it changed under us (v holds the new value): look again
    }
    if (idle >= 16) progress();
    back_off(idle);
    v = word.load(std::memory_order_acquire);
  }
  return (v & abandoned) == 0;
}

// float bits -> bf16 bits in the high half (the low half is not cleared):
// numeric.hpp's f32_to_bf16_bits without the final shift.
inline std::uint32_t bf16_round_high(std::uint32_t x) noexcept {
  const std::uint32_t r = x + 0x7FFFu + ((x >> 16) & 1u);
  return detail::fp_select((x & 0x7FFFFFFFu) > 0x7F800000u, 0x7FFF0000u, r);
}

// bf16 sum, io[i] = io[i] + in[i], bit-identical to kernels::combine (the
// same float add and round-to-nearest-even per element) but two elements per
// 32-bit word: the high one is `w & 0xFFFF0000`, the low one `w << 16`, so
// the vectorised loop needs no 16 <-> 32-bit unpack and pack, which cost most
// of the time without SSE4.1/AVX2 (docs/mpi.md, "Data types and reductions",
// has the figures). Unaligned pointers are fine (memcpy).
inline void bf16_sum_packed(std::byte* io, const std::byte* in, std::size_t n) noexcept {
  const std::size_t pairs = n / 2;
  for (std::size_t i = 0; i < pairs; ++i) {
    std::uint32_t a, b;
    std::memcpy(&a, io + 4 * i, 4);
    std::memcpy(&b, in + 4 * i, 4);
    const float lo = std::bit_cast<float>(a << 16) + std::bit_cast<float>(b << 16);
    const float hi = std::bit_cast<float>(a & 0xFFFF0000u) + std::bit_cast<float>(b & 0xFFFF0000u);
    const std::uint32_t r = (bf16_round_high(std::bit_cast<std::uint32_t>(hi)) & 0xFFFF0000u) |
                            (bf16_round_high(std::bit_cast<std::uint32_t>(lo)) >> 16);
    std::memcpy(io + 4 * i, &r, 4);
  }
  if (n % 2 != 0) {
    std::uint16_t a, b;
    std::memcpy(&a, io + 4 * pairs, 2);
    std::memcpy(&b, in + 4 * pairs, 2);
    const float s = std::bit_cast<float>(detail::bf16_to_f32_bits(a)) + std::bit_cast<float>(detail::bf16_to_f32_bits(b));
    const std::uint16_t r = detail::f32_to_bf16_bits(std::bit_cast<std::uint32_t>(s));
    std::memcpy(io + 4 * pairs, &r, 2);
  }
}

/// inout[i] = in[i] OP inout[i] through polycoll's reduction unit, compiled
/// for the build's target (x86-64 baseline: SSE2). Avg reduces as Sum (the
/// division follows the collective).
template <DType D, ReduceOp Op>
inline void reduce_body(void* in, void* inout, std::size_t n) noexcept {
  using T = typename dtype_tag<D>::type;
  constexpr ReduceOp R = Op == ReduceOp::Avg ? ReduceOp::Sum : Op;
  if constexpr (D == DType::BF16 && R == ReduceOp::Sum) {
    bf16_sum_packed(static_cast<std::byte*>(inout), static_cast<const std::byte*>(in), n);
  } else {
    auto* io = static_cast<T*>(inout);
    kernels::combine(dtype_tag<D>{}, op_tag<R>{}, io, io, static_cast<const T*>(in), n);
  }
}

// Run-time AVX2 dispatch, for x86-64 builds that do not already target AVX2
// (polycoll builds without -march, so a Debian-style build is SSE2 only). The
// user op is the reduction MPI runs on every rank, and the narrow formats are
// compute-bound there, so AVX2 speeds the narrow sums up several times while
// f32 stays memory-bound (docs/mpi.md, "Data types and reductions", measured
// with benchmarks/mpi_user_ops.cpp). Bit-exact: the
// unit is integer code plus IEEE float add/mul/compare, which AVX2 computes
// identically, and target("avx2") enables no FMA, so nothing is contracted.
// flatten inlines the whole unit into the AVX2 clone (an out-of-line helper
// would be the shared baseline COMDAT copy).
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(__AVX2__)
#define POLYCOLL_DETAIL_MPI_AVX2_DISPATCH 1
template <DType D, ReduceOp Op>
[[gnu::target("avx2"), gnu::flatten]] void reduce_body_avx2(void* in, void* inout, std::size_t n) noexcept {
  reduce_body<D, Op>(in, inout, n);
}
/// True when the CPU and the OS support AVX2 (libgcc checks XCR0). Read once.
inline bool cpu_has_avx2() noexcept {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

/// inout[i] = in[i] OP inout[i] for i < n: the AVX2 clone where the build
/// lacks AVX2 and the CPU has it, reduce_body otherwise.
template <DType D, ReduceOp Op>
void user_body(void* in, void* inout, std::size_t n) noexcept {
#if defined(POLYCOLL_DETAIL_MPI_AVX2_DISPATCH)
  if (cpu_has_avx2()) {
    reduce_body_avx2<D, Op>(in, inout, n);
    return;
  }
#endif
  reduce_body<D, Op>(in, inout, n);
}

/// MPI_Op body of (D, Op): inout[i] = in[i] OP inout[i]. Avg reduces as Sum,
/// and the pairs that share a kernel (kernels::detail::kernel_pair) share
/// one body and one AVX2 clone.
template <DType D, ReduceOp Op>
void user_fn(void* in, void* inout, int* len, MPI_Datatype*) {
  constexpr ReduceOp step = Op == ReduceOp::Avg ? ReduceOp::Sum : Op;
  constexpr kernels::detail::KernelPair k = kernels::detail::kernel_pair<D, step>();
  user_body<k.dtype, k.op>(in, inout, static_cast<std::size_t>(*len) * k.lanes);
}

// libpolycoll holds the user op bodies of every valid pair (src/mpi.cpp).
#if !defined(POLYCOLL_HEADER_ONLY)
#define POLYCOLL_DETAIL_X(D, Op) \
  extern template void user_fn<DType::D, ReduceOp::Op>(void*, void*, int*, MPI_Datatype*);
POLYCOLL_DETAIL_FOR_EACH_VALID_PAIR(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X
#endif

/// The cached user op of (D, Op), created on first use (every reduction unit
/// is commutative). Returns MPI_OP_NULL and sets `rc` if MPI_Op_create fails.
template <DType D, ReduceOp Op>
MPI_Op user_op(int& rc) noexcept {
  constexpr std::size_t slot = dtype_index<D>() * reduce_op_count + static_cast<std::size_t>(Op);
  auto& p = process();
  if (p.ready[slot].load(std::memory_order_acquire)) [[likely]] {
    return p.ops[slot];
  }
  if ((rc = install_hook()) != MPI_SUCCESS) return MPI_OP_NULL;
  std::lock_guard lock(p.mutex);
  if (!p.ready[slot].load(std::memory_order_relaxed)) {
    rc = MPI_Op_create(&user_fn<D, Op>, 1, &p.ops[slot]);
    if (rc != MPI_SUCCESS) return MPI_OP_NULL;
    p.ready[slot].store(true, std::memory_order_release);
  }
  return p.ops[slot];
}

/// Number of user ops alive now (tests check the cache is emptied at finalize).
inline std::size_t cached_op_count() noexcept {
  std::size_t n = 0;
  for (const auto& r : process().ready) n += r.load(std::memory_order_acquire) ? 1 : 0;
  return n;
}

}  // namespace polycoll::detail::mpi

#undef POLYCOLL_DETAIL_MPI_AVX2_DISPATCH
