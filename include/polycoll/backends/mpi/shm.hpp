#pragma once
/// @file backends/mpi/shm.hpp
/// The Mpi backend's 2-rank all_reduce through an MPI-3 shared-memory window
/// (internal to backends/mpi.hpp). When both ranks of a 2-rank communicator
/// run on one node (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) keeps them
/// together), each allocates a segment with MPI_Win_allocate_shared and reads
/// the peer's segment directly: a rank copies the operand the peer needs into
/// its own segment, publishes a sequence number, and the peer reduces straight
/// out of it with polycoll's unit. No message goes through MPI's point-to-point
/// layer, whose rendezvous (Open MPI: CMA single copy, a system call per
/// message; MPICH: copy in and copy out of its queues) cost more than the
/// bytes (docs/mpi.md, "The shared-memory window", has the figures).
///
/// Three algorithms over the same segments, by size:
/// - in the line (up to shm_inline_bytes, 56; 40 with the consistency check
///   on): each rank writes its operand into the cache line of its sequence
///   number; both ranks reduce all n elements;
/// - one phase (up to shm_one_phase_to_bytes): each rank copies its whole
///   operand into its segment; both ranks reduce all n elements;
/// - halves (above): rank 0 reduces the first half and rank 1 the rest, each
///   reading the peer's half out of the peer's segment, then each copies the
///   peer's reduced half out of the peer's segment. The same bytes cross
///   between cores as in a point-to-point halving, half the reduction work.
/// Both compute user_fn(in = rank 1's operand, inout = rank 0's operand) for
/// every element, so every rank gets the same bits (NaN payloads included),
/// and the same as the point-to-point exchange of halving.hpp.
///
/// Synchronisation is two monotonic counters per rank in its own segment
/// (with the consistency check on, the sequence number of the line replaces
/// the first: see below)
/// (C++ atomics, acquire/release; the window must report MPI_WIN_UNIFIED, as
/// MPICH's and Open MPI's shared windows do, or the path is not used). Each
/// segment holds two buffer sets, used by calls of odd and even sequence
/// numbers (and two lines for tiny operands, likewise): a rank writes set
/// q % 2 in call q only after it saw the peer
/// enter call q - 1, that is, after the peer finished reading that set in
/// call q - 2, so no call waits for the peer to finish reading.
///
/// With the consistency check on, every call of the communicator announces
/// itself in the line of its sequence number with its packed fingerprint
/// (arrive_checked): a window all_reduce with its operand, any other
/// collective through check_only; so both ranks meet in one line and
/// compare fingerprints before anything else, whatever each called.
///
/// Both ranks take this path in the same calls: the choice depends on the
/// communicator size, the count and dtype, op_timeout and the completion
/// policy (all the same on every rank, as MPI requires of a collective), and
/// on the window's state, which both ranks change together (creating and
/// growing it is collective inside the call, and any failure is agreed on by
/// an MPI_Allreduce before either rank uses it).

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include <mpi.h>

#include <polycoll/backends/mpi/halving.hpp>
#include <polycoll/backends/mpi/process.hpp>
#include <polycoll/detail/call.hpp>
#include <polycoll/detail/std_parts.hpp>
#include <polycoll/dtype.hpp>
#include <polycoll/reduce_op.hpp>

namespace polycoll::detail::mpi {

/// Bytes of the whole buffer up to which 2-rank all_reduce on one node takes
/// the shared-memory window. Each rank's segment holds two buffer sets, so it
/// grows to 2x the largest message, 8 MiB at most. Above 4 MiB the f32 path
/// falls behind MPI's own, and bf16 through MPI's allreduce with polycoll's
/// op already meets its figure there (docs/mpi.md, "The shared-memory window").
inline constexpr std::size_t shm_to_bytes = 4 * 1024 * 1024;

/// Bytes up to which the window path reduces the whole buffer on both ranks
/// in one phase; above, each rank reduces half and a second phase copies the
/// halves across: half the reduction work per rank for one more line
/// crossing, which pays from 64 KiB on both MPIs (docs/mpi.md, "The
/// shared-memory window").
inline constexpr std::size_t shm_one_phase_to_bytes = 16 * 1024;

/// Bytes up to which the operand travels inside the cache line that carries
/// its sequence number: one line crosses between the cores per call and
/// direction, instead of the counter's line and then the data's.
inline constexpr std::size_t shm_inline_bytes = 56;

/// With the consistency check on, the last bytes of a line's data carry the
/// call's packed fingerprint, and operands up to this many bytes travel in
/// the line.
inline constexpr std::size_t shm_checked_inline_bytes = shm_inline_bytes - packed_fingerprint_bytes;

/// A sequence number and the operand of one call, in one cache line.
struct ShmLine {
  alignas(64) std::atomic<std::uint64_t> seq{0};
  std::byte data[shm_inline_bytes];
};
static_assert(sizeof(ShmLine) == 64);

/// One rank's control block, at the start of its segment. Each counter on its
/// own cache line: the peer polls one while this rank writes the other.
struct ShmControl {
  alignas(64) std::atomic<std::uint64_t> posted{0};   // last call whose operand is in this segment (check off)
  alignas(64) std::atomic<std::uint64_t> reduced{0};  // last call whose reduced half is in this segment
  alignas(64) std::atomic<std::uint32_t> closing{0};  // teardown agreement (rank 0's block only)
  ShmLine lines[2];                                   // tiny operands, by call parity
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::uint32_t>::is_always_lock_free,
              "polycoll: the shared-memory window needs lock-free atomics (they live in memory two processes map)");

/// Whether an all_reduce window over `comm` (of `size` ranks) may be made:
/// every rank on one node (MPI_Comm_split_type) and POLYCOLL_MPI_SHM not 0 on
/// any (shm_allowed). Collective over comm; one MPI_Allreduce gives every
/// rank the same answer in `use`. Returns an MPI error code.
inline int window_wanted(MPI_Comm comm, std::size_t size, bool& use) noexcept {
  use = false;
  MPI_Comm node = MPI_COMM_NULL;
  int rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  if (rc != MPI_SUCCESS) return rc;
  int n = 0;
  rc = MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  if (rc != MPI_SUCCESS) return rc;
  int ok = static_cast<std::size_t>(n) == size && shm_allowed() ? 1 : 0;
  rc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
  use = rc == MPI_SUCCESS && ok != 0;
  return rc;
}

/// Allocates this rank's segment of `seg` bytes (64 of them slack for the
/// alignment) of a shared window over `comm`, collectively, and maps every
/// rank's: segs[j] is rank j's segment, aligned to a cache line, its
/// ShmControl initialised by its owner. `ready` says whether every rank
/// could (the window was made, reports MPI_WIN_UNIFIED and maps): agreed on
/// with one MPI_Allreduce before any rank touches a peer's control block, so
/// a failure on one rank is a failure on all, and the window is then freed
/// (or, if the agreement itself failed, left to MPI_Finalize). A ready window
/// is registered with the finalize hook under `id`. Returns an MPI error code.
inline int map_window(MPI_Comm comm, std::size_t rank, std::size_t size, MPI_Aint seg, MPI_Win& win,
                      std::vector<std::byte*>& segs, std::uint64_t& id, bool& ready) noexcept {
  ready = false;
  MPI_Info info = MPI_INFO_NULL;
  // Each rank's segment separately (page-aligned, first touched by its owner).
  if (MPI_Info_create(&info) == MPI_SUCCESS) MPI_Info_set(info, "alloc_shared_noncontig", "true");
  void* base = nullptr;
  int rc = MPI_Win_allocate_shared(seg, 1, info, comm, &base, &win);
  if (info != MPI_INFO_NULL) MPI_Info_free(&info);
  int ok[2] = {rc == MPI_SUCCESS ? 1 : 0, 0};  // window created here; usable here
  if (rc != MPI_SUCCESS) win = MPI_WIN_NULL;
  // The finalize hook must be there to free it (process.hpp).
  if (ok[0] != 0 && install_hook() == MPI_SUCCESS && unified(win) && base != nullptr) {
    bool mapped = true;
    try {
      segs.assign(size, nullptr);
    } catch (...) {
      mapped = false;
    }
    // Open MPI 4.1 returns segments aligned to 8 bytes only (and rounds
    // their size up to pages); every rank aligns each start to a cache line,
    // which lands on the same byte in every mapping (align64).
    for (std::size_t j = 0; mapped && j < size; ++j) {
      MPI_Aint bytes = 0;
      int unit = 0;
      void* at = nullptr;
      mapped = MPI_Win_shared_query(win, static_cast<int>(j), &bytes, &unit, &at) == MPI_SUCCESS && bytes >= seg &&
               at != nullptr;
      if (mapped) segs[j] = align64(at);
    }
    if (mapped) {
      new (segs[rank]) ShmControl();
      ok[1] = 1;
    }
  }
  rc = MPI_Allreduce(MPI_IN_PLACE, ok, 2, MPI_INT, MPI_MIN, comm);
  if (rc != MPI_SUCCESS) return rc;  // the window, if any, is left to MPI_Finalize
  if (ok[1] == 0) {
    if (ok[0] != 0) MPI_Win_free(&win);  // created on every rank: free it together
    return MPI_SUCCESS;
  }
  // Registered for the finalize hook (process.hpp), which frees it with the
  // other ranks if its communicator outlives MPI_Finalize.
  id = register_window(win);
  ready = true;
  return MPI_SUCCESS;
}

/// Waits for `counter` to reach call q. Past the first polls it also drives
/// MPI's progress engine (MPI_Iprobe on `comm`, the communicator's private
/// dup, which no message of the user's reaches, so it consumes nothing): a
/// blocking MPI_Allreduce progresses the rank's other MPI traffic while it
/// waits, and a peer may need exactly that to get here (say it is in an
/// MPI_Ssend to this rank whose matching receive this rank posted before the call).
inline void wait_for(const std::atomic<std::uint64_t>& counter, std::uint64_t q, MPI_Comm comm) noexcept {
  if (counter.load(std::memory_order_acquire) >= q) return;
  unsigned idle = 0;
  while (counter.load(std::memory_order_acquire) < q) {
    if (idle >= 16) probe_progress(comm);
    back_off(idle);
  }
}

/// What the all_reduce windows share (PairShm below; NodeShm,
/// node_shm.hpp): one segment per rank of a communicator whose ranks all run
/// on one node, every rank mapping every segment; its life: made on the first
/// call that needs it, grown (freed and made again, collectively) when a
/// larger message comes, freed collectively within a bound by release(); and
/// the waits, which drive MPI's progress. Each segment is a ShmControl, then
/// two buffer sets of set_bytes_. Not thread-safe: the communicator's
/// submission lock serialises every use.
class ShmWindow {
 public:
  ShmWindow() = default;
  ShmWindow(const ShmWindow&) = delete;
  ShmWindow& operator=(const ShmWindow&) = delete;

  [[nodiscard]] bool ready() const noexcept { return state_ == State::ready; }
  /// True once the window was found unusable (or released): it is not tried again.
  [[nodiscard]] bool refused() const noexcept { return state_ == State::unavailable; }
  /// Bytes of this rank's segment; 0 when there is none.
  [[nodiscard]] std::size_t segment_bytes() const noexcept {
    return state_ == State::ready ? header + 2 * set_bytes_ + 64 : 0;
  }

  /// Frees the window, collectively with every rank, if they all come to
  /// free it within `bound`; otherwise leaves it to MPI_Finalize, where
  /// polycoll's finalize hook frees it on every rank (the drop contract:
  /// never block past the bound), and returns false. Call only while MPI is
  /// usable, after the last all_reduce on this rank.
  bool release(std::chrono::milliseconds bound) noexcept {
    if (state_ != State::ready) return true;
    state_ = State::unavailable;
    // Agreement on one word in rank 0's block (process.hpp, meet): if the
    // bound expires first, a waiting rank withdraws and the late ranks,
    // seeing that, do not call the collective MPI_Win_free either. The wait
    // drives MPI's progress: a peer may need it to get to its destructor.
    auto& word = control(seg_[0]).closing;
    if (!meet(word, static_cast<std::uint32_t>(size_), bound, [this] { probe_progress(comm_); })) {
      return false;  // every rank keeps it registered
    }
    free_registered(id_, win_);
    return true;
  }

 protected:
  enum class State : std::uint8_t { untried, ready, unavailable };

  static constexpr std::size_t header = (sizeof(ShmControl) + 63) / 64 * 64;
  static constexpr std::size_t min_set_bytes = 64 * 1024;

  static ShmControl& control(std::byte* segment) noexcept {
    return *std::launder(reinterpret_cast<ShmControl*>(segment));
  }

  /// True when the window is ready with buffer sets of at least `need` bytes.
  [[nodiscard]] bool holds(std::size_t need) const noexcept { return state_ == State::ready && need <= set_bytes_; }

  /// Makes the window ready with buffer sets of at least `need` bytes over
  /// `comm` (the communicator's private dup, of `size` ranks; this rank:
  /// `rank`), which the waits also use to drive MPI's progress; collective
  /// over comm, in the same call on every rank. Returns MPI_SUCCESS with
  /// ready() telling whether the path can be used (false when the ranks span
  /// nodes, POLYCOLL_MPI_SHM=0 on any, for an MPI without a unified shared
  /// window, or an allocation refused on any rank: then it is never tried
  /// again), or an MPI error code.
  /// A window made or grown here gets sets of `alloc` bytes (>= need).
  int prepare(MPI_Comm comm, std::size_t rank, std::size_t size, std::size_t need, std::size_t alloc) noexcept {
    if (state_ == State::unavailable || holds(need)) return MPI_SUCCESS;
    if (state_ == State::untried) {
      // Every rank on one node, and allowed? Checked once.
      bool use = false;
      if (const int rc = window_wanted(comm, size, use); rc != MPI_SUCCESS) return rc;
      if (!use) {
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
    const std::size_t set_bytes = std::max(alloc, min_set_bytes);
    bool ok = false;
    const int rc =
        map_window(comm, rank_, size_, static_cast<MPI_Aint>(header + 2 * set_bytes + 64), win_, seg_, id_, ok);
    if (rc != MPI_SUCCESS || !ok) {
      state_ = State::unavailable;
      return rc;
    }
    set_bytes_ = set_bytes;
    seq_ = 0;
    state_ = State::ready;
    return MPI_SUCCESS;
  }

  void wait_for(const std::atomic<std::uint64_t>& counter, std::uint64_t q) const noexcept {
    mpi::wait_for(counter, q, comm_);
  }

  MPI_Win win_ = MPI_WIN_NULL;
  MPI_Comm comm_ = MPI_COMM_NULL;  // the communicator's private dup (not owned)
  std::uint64_t id_ = 0;           // in the finalize hook's list
  std::vector<std::byte*> seg_;    // every rank's segment, this rank's included
  std::size_t set_bytes_ = 0;
  std::size_t rank_ = 0;
  std::size_t size_ = 0;
  std::uint64_t seq_ = 0;
  State state_ = State::untried;
};

/// The window of one 2-rank communicator (ShmWindow), with the three
/// algorithms of the file comment and the consistency check's lines.
class PairShm : public ShmWindow {
 public:
  /// Makes the window ready for a message of `count` elements of `elem_size`
  /// bytes (<= shm_to_bytes in all) over the 2-rank `comm` (ShmWindow::prepare).
  int ensure(MPI_Comm comm, std::size_t rank, std::size_t count, std::size_t elem_size) noexcept {
    const std::size_t need = set_bytes_for(count, elem_size);
    if (holds(need)) return MPI_SUCCESS;
    // Powers of two: a window that grows grows at most log2(4 MiB / 64 KiB) times.
    const int rc = prepare(comm, rank, 2, need, std::bit_ceil(need));
    if (ready()) {
      mine_ = seg_[rank_];
      peer_ = seg_[1 - rank_];
    }
    return rc;
  }

  /// True when the window is ready and holds a message of `count` elements
  /// of `elem_size` bytes without growing (ensure() would do nothing).
  [[nodiscard]] bool fits(std::size_t count, std::size_t elem_size) const noexcept {
    return holds(set_bytes_for(count, elem_size));
  }

  /// In-place all_reduce of `count` (> 0) elements of `es` bytes (bytes <=
  /// the size given to ensure()), reducing through `fn`, the pair's user op
  /// body user_fn<D, Op> (Avg: the Sum step only, the caller divides).
  /// Blocks until the result is in `buf`.
  /// With `fp` (the consistency check on), the call's packed fingerprint
  /// travels in the line that announces its arrival: when the peer's
  /// differs, it returns false at once, before touching `buf` (the peer
  /// returns false too, in whatever call it made).
  /// The operand is read from `src` (`buf` itself, or a disjoint array),
  /// which is copied into `buf` only after the fingerprints matched.
  bool all_reduce(MPI_User_function* fn, std::size_t es, const void* src, void* buf, std::size_t count,
                  const PackedFingerprint* fp = nullptr) noexcept {
    const std::size_t bytes = count * es;
    const auto* from = static_cast<const std::byte*>(src);
    auto* to = static_cast<std::byte*>(buf);
    if (bytes <= (fp ? shm_checked_inline_bytes : shm_inline_bytes)) {
      return in_line(fn, es, from, to, count, fp);
    } else if (bytes <= shm_one_phase_to_bytes) {
      return one_phase(fn, es, from, to, count, fp);
    } else {
      return halves(fn, es, from, to, count, fp);
    }
  }

  /// The consistency check of a call that moves nothing through the window
  /// (every collective but a window all_reduce, with the check on): the
  /// fingerprint alone, in the line of the next sequence number. True when
  /// the peer's matches. Blocks until the peer arrives, like all_reduce.
  bool check_only(const PackedFingerprint& fp) noexcept {
    const std::uint64_t q = ++seq_;
    return arrive_checked(q, fp);
  }

 private:
  // One buffer set holds the operand slot and the reduced slot of the halves
  // algorithm, each the larger half (ceil(count / 2) elements) rounded up to a
  // cache line; the one-phase algorithm uses the set as one slot of >= bytes.
  static std::size_t set_bytes_for(std::size_t count, std::size_t elem_size) noexcept {
    return 2 * (((count + 1) / 2 * elem_size + 63) / 64 * 64);
  }

  // The one-phase algorithm with the operand in the line of its sequence
  // number (line q % 2, reused two calls later like the buffer sets).
  // With the check on, every call announces its arrival in line q % 2, with
  // its fingerprint in the line's last bytes (data written before it, in the
  // line or in buffer set q % 2, is published by the same release store), and
  // waits for the peer's line; so a window all_reduce and a check_only of the
  // peer meet, whatever the peer called. True when the fingerprints match.
  bool arrive_checked(std::uint64_t q, const PackedFingerprint& fp) noexcept {
    ShmLine& mine = control(mine_).lines[q & 1];
    const ShmLine& peer = control(peer_).lines[q & 1];
    std::memcpy(mine.data + shm_checked_inline_bytes, &fp, sizeof fp);
    mine.seq.store(q, std::memory_order_release);
    wait_for(peer.seq, q);
    PackedFingerprint theirs;
    std::memcpy(&theirs, peer.data + shm_checked_inline_bytes, sizeof theirs);
    return theirs == fp;
  }

  // `buf` takes the operand from `src` (when they differ), after the arrival.
  static void take(const std::byte* src, std::byte* buf, std::size_t bytes) noexcept {
    if (src != buf) std::memcpy(buf, src, bytes);
  }

  bool in_line(MPI_User_function* fn, std::size_t es, const std::byte* src, std::byte* buf, std::size_t count,
               const PackedFingerprint* fp) noexcept {
    const std::size_t bytes = count * es;
    const std::uint64_t q = ++seq_;
    ShmLine& mine = control(mine_).lines[q & 1];
    ShmLine& peer = control(peer_).lines[q & 1];
    std::memcpy(mine.data, src, bytes);
    if (fp) {
      if (!arrive_checked(q, *fp)) return false;
    } else {
      mine.seq.store(q, std::memory_order_release);
      wait_for(peer.seq, q);
    }
    take(src, buf, bytes);
    alignas(64) std::byte theirs[shm_inline_bytes];
    std::memcpy(theirs, peer.data, bytes);
    int len = static_cast<int>(count);
    if (rank_ == 0) {
      fn(theirs, buf, &len, nullptr);
    } else {
      fn(buf, theirs, &len, nullptr);
      std::memcpy(buf, theirs, bytes);
    }
    return true;
  }

  // The operand is in buffer set q % 2: announced by `posted`, or with the
  // check on by the line of q (arrive_checked).
  bool post(std::uint64_t q, const PackedFingerprint* fp) noexcept {
    if (fp) return arrive_checked(q, *fp);
    control(mine_).posted.store(q, std::memory_order_release);
    wait_for(control(peer_).posted, q);
    return true;
  }

  bool one_phase(MPI_User_function* fn, std::size_t es, const std::byte* src, std::byte* buf, std::size_t count,
               const PackedFingerprint* fp) noexcept {
    const std::size_t bytes = count * es;
    const std::uint64_t q = ++seq_;
    std::byte* const my_set = mine_ + header + (q & 1) * set_bytes_;
    std::byte* const peer_set = peer_ + header + (q & 1) * set_bytes_;
    std::memcpy(my_set, src, bytes);
    if (!post(q, fp)) return false;
    int len = static_cast<int>(count);
    if (rank_ == 0) {
      take(src, buf, bytes);
      fn(peer_set, buf, &len, nullptr);
    } else {
      std::memcpy(buf, peer_set, bytes);
      fn(my_set, buf, &len, nullptr);
    }
    return true;
  }

  bool halves(MPI_User_function* fn, std::size_t es, const std::byte* src, std::byte* buf, std::size_t count,
              const PackedFingerprint* fp) noexcept {
    const auto [mine, mine_n, other, other_n] = halves_of(count, rank_);
    const std::size_t slot = set_bytes_ / 2;
    const std::uint64_t q = ++seq_;
    std::byte* const my_in = mine_ + header + (q & 1) * set_bytes_;
    std::byte* const my_out = my_in + slot;
    std::byte* const peer_in = peer_ + header + (q & 1) * set_bytes_;
    std::byte* const peer_out = peer_in + slot;
    // The peer's operand for the half it reduces.
    std::memcpy(my_in, src + other * es, other_n * es);
    if (!post(q, fp)) return false;
    take(src + mine * es, buf + mine * es, mine_n * es);  // this rank's half; the other comes from the peer
    int len = static_cast<int>(mine_n);
    if (rank_ == 0) {
      // in = rank 1's operand (the peer's slot), inout = this rank's.
      fn(peer_in, buf + mine * es, &len, nullptr);
      std::memcpy(my_out, buf + mine * es, mine_n * es);
    } else {
      // The same operand order: inout = rank 0's operand, copied out of its slot.
      std::memcpy(my_out, peer_in, mine_n * es);
      fn(buf + mine * es, my_out, &len, nullptr);
      std::memcpy(buf + mine * es, my_out, mine_n * es);
    }
    control(mine_).reduced.store(q, std::memory_order_release);
    wait_for(control(peer_).reduced, q);
    std::memcpy(buf + other * es, peer_out, other_n * es);
    return true;
  }

  std::byte* mine_ = nullptr;  // seg_[rank_] and seg_[1 - rank_], as ensure() left them
  std::byte* peer_ = nullptr;
};

}  // namespace polycoll::detail::mpi
