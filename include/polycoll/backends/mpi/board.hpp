#pragma once
/// @file backends/mpi/board.hpp
/// The Mpi backend's status board (internal to backends/mpi.hpp). With
/// op_timeout set, each rank of a communicator publishes the collective it
/// entered last (its number on the communicator and the call) in its own
/// cache line of a shared-memory window over the communicator's ranks on its
/// node (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)). A rank whose collective
/// times out reads its node's lines to say which ranks have not arrived and
/// what each of them entered last: plain loads, which need nothing of the
/// peer, not even that it is inside MPI. Ranks on other nodes are not
/// visible: passive-target RMA would reach them, but MPICH and Open MPI move
/// it only while the target is inside MPI, which a rank stuck in its own
/// computation is not (docs/reliability.md).
///
/// The window is made with the communicator (collective over it: world,
/// duplicate, split; not borrow, which needs no collective), only where a
/// node holds more than one of its ranks, and freed with it, collectively
/// over the node's ranks, after they agree on one word within a short bound
/// (board_meet): ranks that leave a communicator together free it at once;
/// when one is late, every rank of the node leaves the window to
/// MPI_Finalize's hook instead of waiting, silently (nothing is lost but a
/// page of shared memory until then).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <optional>
#include <vector>

#include <mpi.h>

#include <polycoll/backends/mpi/process.hpp>
#include <polycoll/detail/call.hpp>
#include <polycoll/detail/std_parts.hpp>

namespace polycoll::detail::mpi {

/// How long a destructor waits for the node's other ranks to free the board
/// together before leaving it to MPI_Finalize: long enough for ranks that
/// leave a scope after the same collective, short enough that a rank which
/// goes on to other work does not hold up the others.
inline constexpr std::chrono::milliseconds board_meet{50};

/// One rank's line of the board.
struct alignas(64) BoardLine {
  // (collective number << 8) | Call of the last collective this rank
  // entered on the communicator; 0 before the first.
  std::atomic<std::uint64_t> entered{0};
  // Teardown agreement (process.hpp, meet), in the line of the node's first
  // rank only.
  std::atomic<std::uint32_t> closing{0};
};
static_assert(sizeof(BoardLine) == 64);

class StatusBoard {
 public:
  /// What a rank entered last.
  struct Entered {
    std::uint64_t number;  // 0: no collective yet
    Call call;
  };

  StatusBoard() = default;
  StatusBoard(const StatusBoard&) = delete;
  StatusBoard& operator=(const StatusBoard&) = delete;

  /// Makes the board over `comm` (collective over it: every rank calls it in
  /// the same call). Returns MPI_SUCCESS with ready() telling whether the
  /// board is usable (false where the node's ranks could not make or map the
  /// window: then it is not tried again), or an MPI error code.
  int create(MPI_Comm comm) noexcept {
    int size = 0;
    int rc = MPI_Comm_size(comm, &size);
    if (rc != MPI_SUCCESS) return rc;
    rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_);
    if (rc != MPI_SUCCESS) return rc;
    int k = 0;
    MPI_Comm_size(node_, &k);
    if (k == 1) {  // alone on its node (every rank of the node sees the same k): nothing to show
      MPI_Comm_free(&node_);
      return MPI_SUCCESS;
    }
    // Everything this rank allocates, before any collective, so that running
    // out of memory is agreed on like any other failure.
    std::vector<int> local, global;
    bool fits = true;
    try {
      lines_.assign(static_cast<std::size_t>(size), nullptr);
      local.resize(static_cast<std::size_t>(k));
      global.resize(static_cast<std::size_t>(k));
      auto& p = process();
      std::lock_guard lock(p.mutex);
      p.windows.reserve(p.windows.size() + 1);
    } catch (const std::bad_alloc&) {
      fits = false;
    }
    void* base = nullptr;
    // One contiguous segment for the node (a page, not a page per rank), 128
    // bytes per rank: 64 of slack to align the line (Open MPI 4.1 aligns
    // segments to 8 bytes only).
    rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(2 * sizeof(BoardLine)), 1, MPI_INFO_NULL, node_, &base,
                                 &win_);
    int ok[2] = {rc == MPI_SUCCESS ? 1 : 0, 0};  // window created here; usable here
    if (rc != MPI_SUCCESS) win_ = MPI_WIN_NULL;
    if (ok[0] != 0 && fits && base != nullptr) {
      if (unified(win_)) {
        ok[1] = 1;
        mine_ = new (align64(base)) BoardLine();
        // Where each of the node's ranks is in `comm`.
        MPI_Group node_group = MPI_GROUP_NULL, comm_group = MPI_GROUP_NULL;
        for (int i = 0; i < k; ++i) local[static_cast<std::size_t>(i)] = i;
        if (MPI_Comm_group(node_, &node_group) != MPI_SUCCESS || MPI_Comm_group(comm, &comm_group) != MPI_SUCCESS ||
            MPI_Group_translate_ranks(node_group, k, local.data(), comm_group, global.data()) != MPI_SUCCESS) {
          ok[1] = 0;
        }
        if (node_group != MPI_GROUP_NULL) MPI_Group_free(&node_group);
        if (comm_group != MPI_GROUP_NULL) MPI_Group_free(&comm_group);
        for (int i = 0; i < k && ok[1] != 0; ++i) {
          MPI_Aint bytes = 0;
          int unit = 0;
          void* b = nullptr;
          if (MPI_Win_shared_query(win_, i, &bytes, &unit, &b) != MPI_SUCCESS || b == nullptr ||
              bytes < static_cast<MPI_Aint>(2 * sizeof(BoardLine)) || global[static_cast<std::size_t>(i)] < 0 ||
              global[static_cast<std::size_t>(i)] >= size) {
            ok[1] = 0;
            break;
          }
          // The line a peer placed there (initialised before the agreement below).
          auto* line = std::launder(reinterpret_cast<BoardLine*>(align64(b)));
          lines_[static_cast<std::size_t>(global[static_cast<std::size_t>(i)])] = line;
          if (i == 0) first_ = line;
        }
      }
    }
    // Agree before anyone reads a line: every line is initialised once this
    // returns, and a failure on one rank of the node is a failure on all.
    rc = MPI_Allreduce(MPI_IN_PLACE, ok, 2, MPI_INT, MPI_MIN, node_);
    // The window keeps its own communicator: node_ is not needed any more.
    MPI_Comm_free(&node_);
    if (rc != MPI_SUCCESS || ok[1] == 0) {
      if (rc == MPI_SUCCESS && ok[0] != 0) MPI_Win_free(&win_);  // created on every rank: free it together
      // After a failed agreement a window made here is not freed (the peers'
      // state is unknown): MPI_Finalize releases it with everything else.
      win_ = MPI_WIN_NULL;
      lines_.clear();
      mine_ = first_ = nullptr;
      return rc;
    }
    local_ranks_ = static_cast<std::uint32_t>(k);
    // Registered for the finalize hook, which frees it on every rank of the
    // node if the communicator outlives MPI_Finalize or the node's ranks do
    // not meet to free it (room reserved above).
    id_ = register_window(win_);
    return MPI_SUCCESS;
  }

  [[nodiscard]] bool ready() const noexcept { return mine_ != nullptr; }

  /// Publishes that this rank entered collective `number` (counted from 1), `call`.
  void enter(std::uint64_t number, Call call) noexcept {
    if (mine_) mine_->entered.store(number << 8 | static_cast<std::uint64_t>(call), std::memory_order_release);
  }

  /// What rank q of the communicator entered last; nullopt when q is on
  /// another node (or there is no board).
  [[nodiscard]] std::optional<Entered> entered(std::size_t q) const noexcept {
    if (q >= lines_.size() || lines_[q] == nullptr) return std::nullopt;
    const std::uint64_t v = lines_[q]->entered.load(std::memory_order_acquire);
    const auto call = static_cast<std::uint8_t>(v & 0xffu);
    return Entered{v >> 8, call < static_cast<std::uint8_t>(Call::count_) ? static_cast<Call>(call) : Call::sync};
  }

  /// Frees the board, collectively with the node's other ranks, if they all
  /// come to free it within `bound`; otherwise leaves it to MPI_Finalize's
  /// hook on every one of them and returns false. Call only while MPI is usable.
  bool release(std::chrono::milliseconds bound) noexcept {
    if (!ready()) return true;
    mine_ = nullptr;
    // Agreement on one word in the node's first rank's line (process.hpp,
    // meet). No progress while waiting: the bound is short (board_meet).
    if (!meet(first_->closing, local_ranks_, bound, [] {})) return false;
    free_registered(id_, win_);
    lines_.clear();
    first_ = nullptr;
    return true;
  }

 private:
  MPI_Win win_ = MPI_WIN_NULL;
  MPI_Comm node_ = MPI_COMM_NULL;      // this node's ranks of the communicator, while create() runs
  std::vector<BoardLine*> lines_;      // by rank in the communicator; null: another node
  BoardLine* mine_ = nullptr;          // null: no board
  BoardLine* first_ = nullptr;         // the node's first rank's line (the teardown word)
  std::uint32_t local_ranks_ = 0;
  std::uint64_t id_ = 0;               // in the finalize hook's list
};

}  // namespace polycoll::detail::mpi
