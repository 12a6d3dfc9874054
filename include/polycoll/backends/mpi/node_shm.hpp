#pragma once
/// @file backends/mpi/node_shm.hpp
/// The Mpi backend's all_reduce, broadcast, all_gather, reduce_scatter and
/// reduce through an MPI-3 shared-memory window over p >= 2 ranks on one
/// node (internal to backends/mpi.hpp; at 2 ranks it serves all but the
/// all_reduce, which shm.hpp's 2-rank window serves with algorithms that
/// split the work between exactly two ranks; the hierarchical path also
/// makes one per node, of any size). The all_reduce's
/// algorithms are described here; reduce takes the all_reduce's fold without
/// the all-gather, and the other three are one phase each (see their members). When every rank of the communicator runs on one node
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
/// With the consistency check on, every call of the communicator announces
/// itself in the line of its sequence number with its packed fingerprint, as
/// at 2 ranks (shm.hpp): a window all_reduce with its operand (in the line
/// up to 40 bytes), any other collective through check_only; each rank
/// compares every other rank's fingerprint with its own.
///
/// Every rank takes this path in the same calls: the choice depends on the
/// communicator's size, the count and dtype, op_timeout and the completion
/// policy (the same on every rank, as MPI requires of a collective), and on
/// the window's state, which every rank changes together (creating and
/// growing it is collective, and a failure anywhere is agreed on by an
/// MPI_Allreduce before any rank uses it).

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include <mpi.h>

#include <polycoll/backends/mpi/process.hpp>
#include <polycoll/backends/mpi/shm.hpp>
#include <polycoll/detail/call.hpp>
#include <polycoll/detail/std_parts.hpp>
#include <polycoll/dtype.hpp>
#include <polycoll/reduce_op.hpp>

namespace polycoll::detail::mpi {

/// Bytes of the whole buffer up to which an all_reduce over p >= 3 ranks on
/// one node takes the window: 1 MiB, less from 17 ranks on (16 MiB / p), so
/// that the node's segments (each rank's holds two buffer sets, each the
/// message rounded up to a power of two and a slice of it) stay within
/// ~2 x 16 MiB x (1 + 1/p) together, well inside a container's 64 MiB
/// /dev/shm. Above, MPI's own allreduce, whose algorithms for large
/// messages pipeline what this one does in two bulk phases.
constexpr std::size_t node_shm_to_bytes(std::size_t p) noexcept {
  const std::size_t budget = std::size_t{16} * 1024 * 1024;
  return std::min<std::size_t>(std::size_t{1} << 20, budget / (p == 0 ? 1 : p));
}

/// The window of one communicator of p >= 2 ranks on one node, or of one
/// node of the hierarchical path (ShmWindow, shm.hpp: its life, growth and
/// teardown), with the three algorithms of the file comment.
class NodeShm : public ShmWindow {
 public:
  /// Makes the window ready for a message of `count` elements of
  /// `elem_size` bytes (<= node_shm_to_bytes(size) in all) over `comm` (the
  /// communicator's private dup, or the hierarchical path's node, of `size`
  /// ranks; this rank: `rank`): ShmWindow::prepare.
  int ensure(MPI_Comm comm, std::size_t rank, std::size_t size, std::size_t count, std::size_t elem_size) noexcept {
    const std::size_t need = set_bytes_for(count, elem_size, size);
    if (holds(need)) return MPI_SUCCESS;
    // The operand's part a power of two, so that a window that grows grows
    // at most log2 times; the slice's part (ceil(count / p) elements of at
    // most 16 bytes) fits in round64(b / p + 64).
    const std::size_t b = std::bit_ceil(round64(count * elem_size));
    return prepare(comm, rank, size, need, b + round64(b / size + 64));
  }

  /// True when the window is ready and holds a message of `count` elements
  /// of `elem_size` bytes without growing (ensure() would do nothing).
  [[nodiscard]] bool fits(std::size_t count, std::size_t elem_size) const noexcept {
    return ready() && holds(set_bytes_for(count, elem_size, size_));
  }

  /// In-place all_reduce of `count` (> 0) elements of `es` bytes (bytes <=
  /// the size given to ensure()), reducing through `fn`, the pair's user op
  /// body user_fn<D, Op> (Avg: the Sum step only, the caller divides). The
  /// operand is read from `src` (`buf` itself, or a disjoint array). Blocks
  /// until the result is in `buf`.
  /// With `fp` (the consistency check on), the call's packed fingerprint
  /// travels in the line that announces its arrival: when any rank's
  /// differs, it returns false before touching `buf`, and so does every
  /// other rank, in whatever call it made (see arrive_checked).
  bool all_reduce(MPI_User_function* fn, std::size_t es, const void* src, void* buf, std::size_t count,
                  const PackedFingerprint* fp = nullptr) noexcept {
    const std::size_t bytes = count * es;
    const auto* from = static_cast<const std::byte*>(src);
    auto* to = static_cast<std::byte*>(buf);
    const std::uint64_t q = ++seq_;
    if (bytes <= (fp ? shm_checked_inline_bytes : shm_inline_bytes)) {
      ShmLine& mine = control(seg_[rank_]).lines[q & 1];
      std::memcpy(mine.data, from, bytes);
      if (fp) {
        if (!arrive_checked(q, *fp)) return false;
      } else {
        mine.seq.store(q, std::memory_order_release);
        for (std::size_t j = 0; j < size_; ++j) wait_for(control(seg_[j]).lines[q & 1].seq, q);
      }
      fold(fn, es, to, count, [&](std::size_t j) { return control(seg_[j]).lines[q & 1].data; });
      return true;
    }
    std::memcpy(operand(rank_, q), from, bytes);
    if (!arrive(q, fp)) return false;
    if (bytes <= shm_one_phase_to_bytes) {
      fold(fn, es, to, count, [&](std::size_t j) { return operand(j, q); });
      return true;
    }
    // Reduce-scatter: this rank folds its slice straight into buf (its own
    // operand is in its segment already), then publishes it.
    // (No structured binding: clang 14 cannot capture one in the lambda.)
    const std::pair<std::size_t, std::size_t> mine = slice(rank_, count);
    const std::size_t start = mine.first, n = mine.second;
    fold(fn, es, to + start * es, n, [&](std::size_t j) { return operand(j, q) + start * es; });
    std::memcpy(reduced_slice(rank_, q, bytes), to + start * es, n * es);
    control(seg_[rank_]).reduced.store(q, std::memory_order_release);
    // All-gather: every other slice, out of its owner's segment.
    copy_reduced_slices(q, to, count, es);
    return true;
  }

  /// The node's part of the hierarchical all_reduce (docs/mpi.md, "Across
  /// nodes"): this window is over this rank's node, and `cross` joins the
  /// ranks of this rank's index on every node (all nodes have size() ranks).
  /// In place over `count` (> 0) elements of `es` bytes (within ensure()'s
  /// size) read from `src` (`buf` itself, or a disjoint array): all_reduce's
  /// reduce-scatter + all-gather at every size, with one step between them:
  /// this rank's slice, reduced over the node in rank order through `fn`,
  /// goes through MPI_Allreduce(dt, op) over `cross` before it is published
  /// (Avg: `fn` and `op` are the Sum step, the caller divides). Every rank
  /// gets the same bits: each slice is reduced once per node and then by one
  /// MPI_Allreduce, which gives its ranks one result.
  /// Returns an MPI error code. A failed MPI_Allreduce is published with the
  /// slice, so the node's other ranks do not wait forever: they return
  /// MPI_ERR_OTHER, and the window must not be used again (the counters
  /// carry the failure bit from then on).
  int all_reduce_across(MPI_User_function* fn, std::size_t es, const void* src, void* buf, std::size_t count,
                        MPI_Datatype dt, MPI_Op op, MPI_Comm cross) noexcept {
    const std::size_t bytes = count * es;
    auto* to = static_cast<std::byte*>(buf);
    const std::uint64_t q = ++seq_;
    std::memcpy(operand(rank_, q), src, bytes);
    arrive(q, nullptr);
    const std::pair<std::size_t, std::size_t> mine = slice(rank_, count);
    const std::size_t start = mine.first, n = mine.second;
    fold(fn, es, to + start * es, n, [&](std::size_t j) { return operand(j, q) + start * es; });
    // Every node has the same count and size, so the ranks of one index have
    // the same slice: all of them call, or none (an empty slice).
    int rc = MPI_SUCCESS;
    if (n != 0) rc = MPI_Allreduce(MPI_IN_PLACE, to + start * es, static_cast<int>(n), dt, op, cross);
    std::memcpy(reduced_slice(rank_, q, bytes), to + start * es, n * es);
    control(seg_[rank_]).reduced.store(rc == MPI_SUCCESS ? q : q | failed_bit, std::memory_order_release);
    const bool peers_ok = copy_reduced_slices(q, to, count, es);
    return rc != MPI_SUCCESS ? rc : peers_ok ? MPI_SUCCESS : MPI_ERR_OTHER;
  }

  /// Broadcast of `bytes` (> 0, within ensure()'s size) at `buf` from
  /// `root`: the root copies its buffer into its buffer set, every rank
  /// arrives, the others copy it out. With `fp`, the fingerprint rides the
  /// arrival as in all_reduce (false on a mismatch, `buf` untouched).
  bool broadcast(void* buf, std::size_t bytes, std::size_t root, const PackedFingerprint* fp = nullptr) noexcept {
    const std::uint64_t q = ++seq_;
    if (rank_ == root) std::memcpy(operand(rank_, q), buf, bytes);
    if (!arrive(q, fp)) return false;
    if (rank_ != root) std::memcpy(buf, operand(root, q), bytes);
    return true;
  }

  /// The node's part of the hierarchical broadcast (docs/mpi.md, "Across
  /// nodes"): `bytes` (> 0, within ensure()'s size, at most INT_MAX) at `buf`
  /// from this node's rank `root`, which first receives them by MPI_Bcast
  /// from rank `cross_root` of `cross` (the ranks of its index on every
  /// node), then broadcast's copy through the window. Returns an MPI error
  /// code. A failed MPI_Bcast is published with the arrival, so the node's
  /// other ranks do not wait forever: they return MPI_ERR_OTHER with `buf`
  /// untouched, and the window must not be used again (its counters carry
  /// the failure bit from then on).
  int broadcast_across(void* buf, std::size_t bytes, std::size_t root, int cross_root, MPI_Comm cross) noexcept {
    const std::uint64_t q = ++seq_;
    int rc = MPI_SUCCESS;
    if (rank_ == root) {
      rc = MPI_Bcast(buf, static_cast<int>(bytes), MPI_BYTE, cross_root, cross);
      if (rc == MPI_SUCCESS) std::memcpy(operand(rank_, q), buf, bytes);
    }
    publish_arrival(q, rc != MPI_SUCCESS);
    if (rank_ == root) return rc;
    if ((control(seg_[root]).posted.load(std::memory_order_acquire) & failed_bit) != 0) return MPI_ERR_OTHER;
    std::memcpy(buf, operand(root, q), bytes);
    return MPI_SUCCESS;
  }

  /// All-gather of `block` (> 0, within ensure()'s size) bytes per rank:
  /// `send` (this rank's block; may be exactly recv + rank * block) into
  /// `recv`, rank j's block at recv + j * block. With `fp`: as broadcast.
  bool all_gather(const void* send, void* recv, std::size_t block, const PackedFingerprint* fp = nullptr) noexcept {
    const std::uint64_t q = ++seq_;
    std::memcpy(operand(rank_, q), send, block);
    if (!arrive(q, fp)) return false;
    auto* to = static_cast<std::byte*>(recv);
    for (std::size_t j = 0; j < size_; ++j) {
      if (j != rank_) std::memcpy(to + j * block, operand(j, q), block);
    }
    if (to + rank_ * block != send) std::memcpy(to + rank_ * block, send, block);
    return true;
  }

  /// Reduce-scatter of `count` (> 0) elements of `es` bytes per rank: every
  /// rank's whole `send` (size() blocks of count; within ensure()'s size)
  /// goes into its buffer set, and this rank folds block rank() of the p
  /// operands in rank order into `recv` through `fn`, as all_reduce does
  /// (Avg: the Sum step only, the caller divides). `recv` may be exactly
  /// this rank's block of `send`. With `fp`: as broadcast.
  bool reduce_scatter(MPI_User_function* fn, std::size_t es, const void* send, void* recv, std::size_t count,
                      const PackedFingerprint* fp = nullptr) noexcept {
    const std::uint64_t q = ++seq_;
    const std::size_t block = count * es;
    std::memcpy(operand(rank_, q), send, size_ * block);
    if (!arrive(q, fp)) return false;
    fold(fn, es, static_cast<std::byte*>(recv), count,
         [&](std::size_t j) { return operand(j, q) + rank_ * block; });
    return true;
  }

  /// Reduce of `count` (> 0) elements of `es` bytes (within ensure()'s
  /// size) to `root`: every rank's `send` goes into its buffer set and the
  /// fold is all_reduce's, in rank order through `fn` (Avg: the Sum step
  /// only, the root divides): up to shm_one_phase_to_bytes the root folds
  /// the p operands into `recv`; above, each rank folds its slice of them
  /// into its segment (the root: into `recv`) and the root copies the other
  /// slices out, so that p cores share the fold. Only the root writes, to
  /// its `recv`, which may be exactly its `send`; the others' `recv` is not
  /// touched. With `fp`: as broadcast.
  bool reduce(MPI_User_function* fn, std::size_t es, const void* send, void* recv, std::size_t count,
              std::size_t root, const PackedFingerprint* fp = nullptr) noexcept {
    const std::size_t bytes = count * es;
    const std::uint64_t q = ++seq_;
    std::memcpy(operand(rank_, q), send, bytes);
    if (!arrive(q, fp)) return false;
    auto* to = static_cast<std::byte*>(recv);
    if (bytes <= shm_one_phase_to_bytes) {
      if (rank_ == root) fold(fn, es, to, count, [&](std::size_t j) { return operand(j, q); });
      return true;
    }
    const std::pair<std::size_t, std::size_t> mine = slice(rank_, count);
    const std::size_t start = mine.first, n = mine.second;
    std::byte* const out = rank_ == root ? to + start * es : reduced_slice(rank_, q, bytes);
    fold(fn, es, out, n, [&](std::size_t j) { return operand(j, q) + start * es; });
    if (rank_ != root) {
      control(seg_[rank_]).reduced.store(q, std::memory_order_release);
      return true;
    }
    copy_reduced_slices(q, to, count, es);
    return true;
  }

  /// The consistency check of a call that moves nothing through the window
  /// (every collective but a window all_reduce, with the check on): the
  /// fingerprint alone, in the line of the next sequence number. True when
  /// every rank's matches. Blocks until every rank arrives, like all_reduce.
  bool check_only(const PackedFingerprint& fp) noexcept { return arrive_checked(++seq_, fp); }

 private:
  // Elements per fold block: the accumulator stays in L1 while the p
  // operands stream through it.
  static constexpr std::size_t fold_block_bytes = 8192;

  // Set in a published `reduced` counter when the rank's slice is not valid
  // (all_reduce_across), or in `posted` when its MPI step before the
  // arrival failed (broadcast_across): waits for the counter still end (it
  // is above any q).
  static constexpr std::uint64_t failed_bit = std::uint64_t{1} << 63;

  static std::size_t round64(std::size_t b) noexcept { return (b + 63) / 64 * 64; }
  static std::size_t slice_elements(std::size_t count, std::size_t p) noexcept { return (count + p - 1) / p; }
  // One buffer set: the operand, then this rank's reduced slice.
  static std::size_t set_bytes_for(std::size_t count, std::size_t elem_size, std::size_t p) noexcept {
    return round64(count * elem_size) + round64(slice_elements(count, p) * elem_size);
  }
  std::byte* operand(std::size_t j, std::uint64_t q) const noexcept { return seg_[j] + header + (q & 1) * set_bytes_; }
  // Rank j's reduced slice of call q, whose operand has `bytes`: after the
  // operand in the set (the same place on every rank: the count is the same).
  std::byte* reduced_slice(std::size_t j, std::uint64_t q, std::size_t bytes) const noexcept {
    return operand(j, q) + round64(bytes);
  }
  // Rank j's slice of `count` elements: (first element, elements).
  std::pair<std::size_t, std::size_t> slice(std::size_t j, std::size_t count) const noexcept {
    const std::size_t chunk = slice_elements(count, size_);
    const std::size_t start = std::min(count, j * chunk);
    return {start, std::min(chunk, count - start)};
  }
  // Every other rank's reduced slice of call q (`count` elements of `es`
  // bytes in all), out of its owner's segment once published, into `to`.
  // False when a rank published its slice with failed_bit (its step between
  // the two phases failed: all_reduce_across).
  bool copy_reduced_slices(std::uint64_t q, std::byte* to, std::size_t count, std::size_t es) const noexcept {
    bool ok = true;
    for (std::size_t j = 0; j < size_; ++j) {
      if (j == rank_) continue;
      wait_for(control(seg_[j]).reduced, q);
      ok = ok && (control(seg_[j]).reduced.load(std::memory_order_relaxed) & failed_bit) == 0;
      const auto [s, m] = slice(j, count);
      std::memcpy(to + s * es, reduced_slice(j, q, count * es), m * es);
    }
    return ok;
  }

  // Call q's arrival once this rank's data is in its buffer set: with `fp`
  // the line of q (arrive_checked), else `posted`. True when the
  // fingerprints matched (always without `fp`). Every rank waits for every
  // other, which is what lets set q % 2 be written again in call q + 2.
  bool arrive(std::uint64_t q, const PackedFingerprint* fp) noexcept {
    if (fp) return arrive_checked(q, *fp);
    publish_arrival(q, false);
    return true;
  }

  // Call q's arrival on `posted`, with failed_bit when this rank's step
  // before it failed (broadcast_across), then every rank's. (Not PairShm's
  // post, which takes a fingerprint: that is arrive's job here.)
  void publish_arrival(std::uint64_t q, bool failed) noexcept {
    control(seg_[rank_]).posted.store(failed ? q | failed_bit : q, std::memory_order_release);
    for (std::size_t j = 0; j < size_; ++j) wait_for(control(seg_[j]).posted, q);
  }

  // Call q's arrival with the consistency check on: the packed fingerprint
  // in the last bytes of line q % 2 (data written before it, in the line or
  // in buffer set q % 2, is published by the same release store), then every
  // rank's line, compared with this rank's. Every rank reaches the same
  // verdict: if any two fingerprints differ, each rank's differs from some
  // other rank's. Waits for every rank even past a difference, so that all
  // leave the call together.
  bool arrive_checked(std::uint64_t q, const PackedFingerprint& fp) noexcept {
    ShmLine& mine = control(seg_[rank_]).lines[q & 1];
    std::memcpy(mine.data + shm_checked_inline_bytes, &fp, sizeof fp);
    mine.seq.store(q, std::memory_order_release);
    bool same = true;
    for (std::size_t j = 0; j < size_; ++j) {
      if (j == rank_) continue;
      const ShmLine& theirs = control(seg_[j]).lines[q & 1];
      wait_for(theirs.seq, q);
      PackedFingerprint f;
      std::memcpy(&f, theirs.data + shm_checked_inline_bytes, sizeof f);
      same = same && f == fp;
    }
    return same;
  }

  // out[0, n) = operand 0 OP operand 1 ... OP operand p-1 (at_rank(j) points
  // at rank j's first element), a block at a time.
  template <class At>
  void fold(MPI_User_function* fn, std::size_t es, std::byte* out, std::size_t n, At&& at_rank) const noexcept {
    const std::size_t block = fold_block_bytes / es > 0 ? fold_block_bytes / es : 1;
    for (std::size_t b = 0; b < n; b += block) {
      const std::size_t m = std::min(block, n - b);
      std::memcpy(out + b * es, at_rank(0) + b * es, m * es);
      int len = static_cast<int>(m);
      for (std::size_t j = 1; j < size_; ++j) fn(at_rank(j) + b * es, out + b * es, &len, nullptr);
    }
  }
};

}  // namespace polycoll::detail::mpi
