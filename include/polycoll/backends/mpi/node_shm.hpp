#pragma once
/// @file backends/mpi/node_shm.hpp
/// The Mpi backend's all_reduce through an MPI-3 shared-memory window over
/// p >= 3 ranks on one node (internal to backends/mpi.hpp; shm.hpp is the
/// 2-rank window, whose algorithms split the work between exactly two
/// ranks). When every rank of the communicator runs on one node
/// (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) keeps them all together), each
/// allocates a segment with MPI_Win_allocate_shared and maps every other
/// rank's: a rank copies its operand into its own segment, publishes a
/// sequence number, and reads the others' operands straight out of their
/// segments. No message goes through MPI's point-to-point layer, and the
/// call costs one cache-line publication per rank instead of MPI's log2(p)
/// rounds of messages.
///
/// Three algorithms over the same segments, by size:
/// - in the line (up to shm_inline_bytes): the operand travels in the cache
///   line of the sequence number; every rank folds all p operands;
/// - one phase (up to shm_one_phase_to_bytes): the operand goes into the
///   rank's buffer set; every rank folds all p operands;
/// - reduce-scatter + all-gather (above, up to node_shm_to_bytes(p)): rank j
///   folds slice j (ceil(count / p) elements) of the p operands, publishes it
///   in its segment, and every rank copies the p reduced slices out.
/// Every fold is in rank order, operand 0 OP operand 1 OP ... OP operand
/// p-1, through user_fn<D, Op> (the MPI user op's unit: inout = inout OP in),
/// on blocks that stay in L1. So every rank gets the same bits, and the
/// same bits as Threads' and NoOp's rank-order fold and as
/// Options::reproducible's (kernels::combine_n is bit-identical to that chain
/// of binary steps).
///
/// Synchronisation and buffer reuse are those of the 2-rank window (shm.hpp):
/// monotonic counters in each rank's ShmControl, C++ atomics (the window
/// must report MPI_WIN_UNIFIED), two buffer sets and two lines used by calls
/// of odd and even sequence numbers. Every call waits until all p ranks have
/// entered it, so a rank that writes set q % 2 in call q knows that every
/// rank has finished call q - 2, the last that read it. The waits drive MPI's
/// progress (MPI_Iprobe on the communicator's private dup), as a blocking
/// MPI_Allreduce would.
///
/// Every rank takes this path in the same calls: the choice depends on the
/// communicator's size, the count and dtype, op_timeout and the completion
/// policy (the same on every rank, as MPI requires of a collective), and on
/// the window's state, which every rank changes together (creating and
/// growing it is collective, and a failure anywhere is agreed on by an
/// MPI_Allreduce before any rank uses it).

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include <mpi.h>

#include <polycoll/backends/mpi/process.hpp>
#include <polycoll/backends/mpi/shm.hpp>
#include <polycoll/dtype.hpp>
#include <polycoll/reduce_op.hpp>

namespace polycoll::detail::mpi {

/// Bytes of the whole buffer up to which an all_reduce over p >= 3 ranks on
/// one node takes the window: 1 MiB, less from 32 ranks on, so that the
/// node's segments (each rank's holds two buffer sets of the message and a
/// slice) stay within ~2 x 32 MiB together. Above, MPI's own allreduce,
/// whose algorithms for large messages pipeline what this one does in two
/// bulk phases.
constexpr std::size_t node_shm_to_bytes(std::size_t p) noexcept {
  const std::size_t budget = std::size_t{32} * 1024 * 1024;
  return std::min<std::size_t>(std::size_t{1} << 20, budget / (p == 0 ? 1 : p));
}

/// The window of one communicator of p >= 3 ranks on one node: created on
/// the first call that needs it, grown (freed and created again,
/// collectively) when a larger message comes, released by release(). Not
/// thread-safe: the communicator's submission lock serialises every use.
class NodeShm {
 public:
  enum class State : std::uint8_t { untried, ready, unavailable };

  NodeShm() = default;
  NodeShm(const NodeShm&) = delete;
  NodeShm& operator=(const NodeShm&) = delete;

  /// Makes the window ready for a message of `count` elements of
  /// `elem_size` bytes (<= node_shm_to_bytes(size) in all) over `comm` (the
  /// communicator's private dup, of `size` >= 3 ranks; this rank: `rank`),
  /// which the waits also use to drive MPI's progress; collective over comm,
  /// in the same call on every rank. Returns MPI_SUCCESS with ready() telling
  /// whether the path can be used (false when the ranks span nodes, for an
  /// MPI without a unified shared window, or an allocation refused on any
  /// rank: then it is never tried again), or an MPI error code.
  int ensure(MPI_Comm comm, std::size_t rank, std::size_t size, std::size_t count, std::size_t elem_size) noexcept {
    if (state_ == State::unavailable) return MPI_SUCCESS;
    const std::size_t need = set_bytes_for(count, elem_size, size);
    if (state_ == State::ready && need <= set_bytes_) return MPI_SUCCESS;
    if (state_ == State::untried) {
      // Every rank on one node? Checked once; the split is local to this call.
      MPI_Comm node = MPI_COMM_NULL;
      int rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
      if (rc != MPI_SUCCESS) return rc;
      int n = 0;
      rc = MPI_Comm_size(node, &n);
      MPI_Comm_free(&node);
      if (rc != MPI_SUCCESS) return rc;
      // Every rank on this one node, and allowed everywhere (shm_allowed).
      int use = static_cast<std::size_t>(n) == size && shm_allowed() ? 1 : 0;
      rc = MPI_Allreduce(MPI_IN_PLACE, &use, 1, MPI_INT, MPI_MIN, comm);
      if (rc != MPI_SUCCESS) return rc;
      if (use == 0) {
        state_ = State::unavailable;
        return MPI_SUCCESS;
      }
    } else {
      // Growing: every rank is in this call. The barrier makes sure no rank
      // still reads a segment when MPI_Win_free unmaps it.
      state_ = State::unavailable;  // if the barrier fails, the window is left to MPI_Finalize
      if (const int rc = MPI_Barrier(comm); rc != MPI_SUCCESS) return rc;
      free_registered(id_, win_);
    }
    rank_ = rank;
    size_ = size;
    comm_ = comm;
    return create(comm, std::max(std::bit_ceil(need), min_set_bytes));
  }

  [[nodiscard]] bool ready() const noexcept { return state_ == State::ready; }
  [[nodiscard]] std::size_t segment_bytes() const noexcept {
    return state_ == State::ready ? header + 2 * set_bytes_ + 64 : 0;
  }

  /// In-place all_reduce of `count` (> 0) elements of D (bytes <= the size
  /// given to ensure()), reducing through user_fn<D, Op> (Avg: the Sum step
  /// only, the caller divides). The operand is read from `src` (`buf`
  /// itself, or a disjoint array). Blocks until the result is in `buf`.
  template <DType D, ReduceOp Op>
  void all_reduce(const void* src, void* buf, std::size_t count) noexcept {
    const std::size_t bytes = count * size_of(D);
    const auto* from = static_cast<const std::byte*>(src);
    auto* to = static_cast<std::byte*>(buf);
    const std::uint64_t q = ++seq_;
    if (bytes <= shm_inline_bytes) {
      ShmLine& mine = control(seg_[rank_]).lines[q & 1];
      std::memcpy(mine.data, from, bytes);
      mine.seq.store(q, std::memory_order_release);
      for (std::size_t j = 0; j < size_; ++j) wait_for(control(seg_[j]).lines[q & 1].seq, q);
      fold<D, Op>(to, count, [&](std::size_t j) { return control(seg_[j]).lines[q & 1].data; });
      return;
    }
    std::memcpy(operand(rank_, q), from, bytes);
    control(seg_[rank_]).posted.store(q, std::memory_order_release);
    for (std::size_t j = 0; j < size_; ++j) wait_for(control(seg_[j]).posted, q);
    if (bytes <= shm_one_phase_to_bytes) {
      fold<D, Op>(to, count, [&](std::size_t j) { return operand(j, q); });
      return;
    }
    // Reduce-scatter: this rank folds its slice straight into buf (its own
    // operand is in its segment already), then publishes it.
    constexpr std::size_t es = size_of(D);
    const std::size_t chunk = slice_elements(count, size_);
    const auto slice = [&](std::size_t j) {
      const std::size_t start = std::min(count, j * chunk);
      return std::pair{start, std::min(chunk, count - start)};
    };
    const auto [start, n] = slice(rank_);
    fold<D, Op>(to + start * es, n, [&](std::size_t j) { return operand(j, q) + start * es; });
    // The reduced slice follows the operand in the set (the same place on
    // every rank: the count is the same).
    const std::size_t at = round64(bytes);
    std::memcpy(operand(rank_, q) + at, to + start * es, n * es);
    control(seg_[rank_]).reduced.store(q, std::memory_order_release);
    // All-gather: every other slice, out of its owner's segment.
    for (std::size_t j = 0; j < size_; ++j) {
      if (j == rank_) continue;
      wait_for(control(seg_[j]).reduced, q);
      const auto [s, m] = slice(j);
      std::memcpy(to + s * es, operand(j, q) + at, m * es);
    }
  }

  /// Frees the window, collectively with every rank, if they all come to
  /// free it within `bound`; otherwise leaves it to MPI_Finalize, where
  /// polycoll's finalize hook frees it on every rank (the drop contract:
  /// never block past the bound), and returns false. Call only while MPI is
  /// usable, after the last all_reduce on this rank.
  bool release(std::chrono::milliseconds bound) noexcept {
    if (state_ != State::ready) return true;
    state_ = State::unavailable;
    // Agreement on one word in rank 0's block (process.hpp, meet); the wait
    // drives MPI's progress, which a late rank may need to get to its destructor.
    if (!meet(control(seg_[0]).closing, static_cast<std::uint32_t>(size_), bound, [this] { progress(); })) {
      return false;  // every rank keeps it registered
    }
    free_registered(id_, win_);
    return true;
  }

 private:
  static constexpr std::size_t header = (sizeof(ShmControl) + 63) / 64 * 64;
  static constexpr std::size_t min_set_bytes = 64 * 1024;
  // Elements per fold block: the accumulator stays in L1 while the p
  // operands stream through it.
  static constexpr std::size_t fold_block_bytes = 8192;

  static std::size_t round64(std::size_t b) noexcept { return (b + 63) / 64 * 64; }
  static std::size_t slice_elements(std::size_t count, std::size_t p) noexcept { return (count + p - 1) / p; }
  // One buffer set: the operand, then this rank's reduced slice.
  static std::size_t set_bytes_for(std::size_t count, std::size_t elem_size, std::size_t p) noexcept {
    return round64(count * elem_size) + round64(slice_elements(count, p) * elem_size);
  }
  static ShmControl& control(std::byte* segment) noexcept {
    return *std::launder(reinterpret_cast<ShmControl*>(segment));
  }
  std::byte* operand(std::size_t j, std::uint64_t q) const noexcept { return seg_[j] + header + (q & 1) * set_bytes_; }

  // out[0, n) = operand 0 OP operand 1 ... OP operand p-1 (at_rank(j) points
  // at rank j's first element), a block at a time.
  template <DType D, ReduceOp Op, class At>
  void fold(std::byte* out, std::size_t n, At&& at_rank) const noexcept {
    constexpr std::size_t es = size_of(D);
    constexpr std::size_t block = fold_block_bytes / es > 0 ? fold_block_bytes / es : 1;
    for (std::size_t b = 0; b < n; b += block) {
      const std::size_t m = std::min(block, n - b);
      std::memcpy(out + b * es, at_rank(0) + b * es, m * es);
      int len = static_cast<int>(m);
      for (std::size_t j = 1; j < size_; ++j) user_fn<D, Op>(at_rank(j) + b * es, out + b * es, &len, nullptr);
    }
  }

  int create(MPI_Comm comm, std::size_t set_bytes) noexcept {
    MPI_Info info = MPI_INFO_NULL;
    // Each rank's segment separately (page-aligned, first touched by its owner).
    if (MPI_Info_create(&info) == MPI_SUCCESS) MPI_Info_set(info, "alloc_shared_noncontig", "true");
    void* base = nullptr;
    // 64 bytes of slack for the alignment (shm.hpp, create).
    const auto seg = static_cast<MPI_Aint>(header + 2 * set_bytes + 64);
    int rc = MPI_Win_allocate_shared(seg, 1, info, comm, &base, &win_);
    if (info != MPI_INFO_NULL) MPI_Info_free(&info);
    int ok[2] = {rc == MPI_SUCCESS ? 1 : 0, 0};  // window created here; usable here
    if (rc != MPI_SUCCESS) win_ = MPI_WIN_NULL;
    bool mapped = false;
    // The finalize hook must be there to free it (process.hpp).
    if (ok[0] != 0 && install_hook() == MPI_SUCCESS && unified(win_) && base != nullptr) {
      try {
        seg_.assign(size_, nullptr);
        mapped = true;
      } catch (...) {
      }
      for (std::size_t j = 0; mapped && j < size_; ++j) {
        MPI_Aint peer_size = 0;
        int unit = 0;
        void* peer_base = nullptr;
        mapped = MPI_Win_shared_query(win_, static_cast<int>(j), &peer_size, &unit, &peer_base) == MPI_SUCCESS &&
                 peer_size >= seg && peer_base != nullptr;
        if (mapped) seg_[j] = align64(peer_base);
      }
      if (mapped) {
        new (seg_[rank_]) ShmControl();
        ok[1] = 1;
      }
    }
    // Agree before any rank uses the window: every control block is
    // initialised once this returns, and a failure on one rank is a failure on all.
    rc = MPI_Allreduce(MPI_IN_PLACE, ok, 2, MPI_INT, MPI_MIN, comm);
    if (rc != MPI_SUCCESS) {
      state_ = State::unavailable;  // the window, if any, is left to MPI_Finalize
      return rc;
    }
    if (ok[1] == 0) {
      if (ok[0] != 0) MPI_Win_free(&win_);  // created on every rank: free it together
      state_ = State::unavailable;
      return MPI_SUCCESS;
    }
    id_ = register_window(win_);
    set_bytes_ = set_bytes;
    seq_ = 0;
    state_ = State::ready;
    return MPI_SUCCESS;
  }

  // Waits for `counter` to reach call q, driving MPI's progress past the
  // first polls (see PairShm::wait_for for why).
  void wait_for(const std::atomic<std::uint64_t>& counter, std::uint64_t q) const noexcept {
    if (counter.load(std::memory_order_acquire) >= q) return;
    unsigned idle = 0;
    while (counter.load(std::memory_order_acquire) < q) {
      if (idle >= 16) progress();
      back_off(idle);
    }
  }
  void progress() const noexcept {
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE);
  }

  MPI_Win win_ = MPI_WIN_NULL;
  MPI_Comm comm_ = MPI_COMM_NULL;  // the communicator's dup (not owned)
  std::uint64_t id_ = 0;           // in the finalize hook's list
  std::vector<std::byte*> seg_;    // every rank's segment, this rank's included
  std::size_t set_bytes_ = 0;
  std::size_t rank_ = 0;
  std::size_t size_ = 0;
  std::uint64_t seq_ = 0;
  State state_ = State::untried;
};

}  // namespace polycoll::detail::mpi
