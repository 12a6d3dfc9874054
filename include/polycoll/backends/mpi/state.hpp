#pragma once
/// @file backends/mpi/state.hpp
/// What one Mpi communicator owns (detail::mpi::CommState), behind the one
/// pointer a BasicMpi holds. Internal to backends/mpi.hpp.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mpi.h>

#include <polycoll/backends/mpi/board.hpp>
#include <polycoll/backends/mpi/node_shm.hpp>
#include <polycoll/backends/mpi/process.hpp>
#include <polycoll/backends/mpi/requests.hpp>
#include <polycoll/backends/mpi/shm.hpp>
#include <polycoll/communicator.hpp>
#include <polycoll/detail/send_check.hpp>
#include <polycoll/error.hpp>

namespace polycoll {

namespace detail::mpi {

// Everything a communicator owns, behind one pointer: moves are cheap and the
// submission lock has a stable address.
struct CommState {
  MPI_Comm comm = MPI_COMM_NULL;
  bool owned = false;                          // MPI_Comm_free at the end
  MPI_Errhandler saved = MPI_ERRHANDLER_NULL;  // a borrowed comm's handler, restored at the end
  std::size_t rank = 0;
  std::size_t size = 1;
  std::uint32_t tag_ub = 32767;
  bool serialized = false;  // MPI provides less than MPI_THREAD_MULTIPLE: use the process lock
  Options options;
  SubmitLock mutex;  // serialises submissions
  std::uint64_t seq = 0;
  RequestPool pool;
  std::optional<Error> deferred;  // an error found while posting, returned by the next sync()
  std::size_t groups = 0;         // open groups (p2p is posted as submitted: nothing to batch)
  std::vector<int> v_ints;        // the v-collectives' int counts and displacements, reused
  bool check = false;             // Options::check_consistency or POLYCOLL_CHECK=1
  SendLedger ledger;              // the check's hashes of the sends not yet completed by a sync()
  std::uint64_t coll_seq = 0;     // collectives so far: the fingerprints' sequence number
  std::vector<std::uint64_t> xbuf;  // every rank's fingerprint (or split's color and key), then mine; reused
  // Buffers of internal exchanges and v-collective arrays whose collective
  // timed out: MPI may still use them until a later sync() completes it.
  std::vector<std::vector<std::uint64_t>> retired_x;
  std::vector<std::vector<int>> retired_ints;
  // polycoll's own all_reduce algorithms (the 2-rank ones of
  // backends/mpi/halving.hpp and the windows): their own dup of comm, so
  // their point-to-point messages never match the user's send/recv and their
  // waits' MPI_Iprobe consumes nothing of the user's, made on first use
  // (collective: every rank takes that path in the same call); and the
  // halving's scratch half, grown, never shrunk.
  MPI_Comm pair_comm = MPI_COMM_NULL;
  std::vector<std::byte> halving_scratch;
  // POLYCOLL_MPI_ALL_REDUCE: this process's, and the one every rank agreed
  // on when pair_comm was made (none unless all ranks said the same).
  ForcedAllReduce forced_local = ForcedAllReduce::none;
  std::string forced_text;  // the value, when it is invalid (for the error)
  ForcedAllReduce forced = ForcedAllReduce::none;
  // The algorithm of the last all_reduce (last_all_reduce_algorithm()), and
  // of the last all_reduce, broadcast, reduce, all_gather or reduce_scatter
  // (last_algorithm()).
  const char* last_all_reduce = "none";
  const char* last_algorithm = "none";
  // The result block of a blocking in-place reduce_scatter, grown, never shrunk.
  std::vector<std::byte> reduce_scatter_scratch;
  // The root's copy of its buffer for a blocking in-place reduce where MPI
  // cannot take MPI_IN_PLACE (detail::mpi::in_place_reduce_faults), grown,
  // never shrunk.
  std::vector<std::byte> in_place_copy;
  // The scratch of the blocking reproducible reductions
  // (backends/mpi/ordered.hpp), grown, never shrunk.
  std::vector<std::byte> ordered_scratch;
  // The 2-rank shared-memory window (backends/mpi/shm.hpp), on pair_comm.
  PairShm shm;
  // The window of 2 or more ranks on one node (backends/mpi/node_shm.hpp;
  // at 2 for every collective but all_reduce), on pair_comm.
  NodeShm node_shm;
  // The hierarchical all_reduce, broadcast and reduce (the ranks span
  // nodes, or POLYCOLL_MPI_NODE_SIZE makes them: docs/mpi.md, "Across
  // nodes"): decided once, when pair_comm is made (collective: every rank
  // decides in the same call; untried: never decided, not taken); the
  // node's ranks (node_comm, a window over them) and the ranks of this
  // rank's index on every node (cross_comm). fake_node_local: this
  // process's POLYCOLL_MPI_NODE_SIZE; fake_node: the value every rank agreed
  // on when pair_comm was made (0 unless all said the same). `broken`: the
  // all_reduce's MPI_Allreduce or the broadcast's MPI_Bcast between the
  // window's phases failed on this rank's node (the window's counters carry
  // the failure bit): every later call of the path on this rank fails.
  // hier_where holds, for every rank of the communicator, its index on its
  // node and its rank in the cross_comm of that index (2 ints per rank), so
  // that a rooted call finds the root's node peers; hier_scratch holds a
  // node's partial result on its way to the root, grown with the window,
  // never shrunk.
  enum class Hierarchy : std::uint8_t { untried, no, yes, broken };
  Hierarchy hierarchy = Hierarchy::untried;
  // Whether the hierarchical path serves the calls it may take: a broken
  // path still takes them, to fail them (every rank decided alike).
  bool hierarchical() const noexcept { return hierarchy == Hierarchy::yes || hierarchy == Hierarchy::broken; }
  long fake_node_local = 0;
  long fake_node = 0;
  std::string fake_node_text;  // the value, when it is invalid (for the error)
  MPI_Comm node_comm = MPI_COMM_NULL;
  MPI_Comm cross_comm = MPI_COMM_NULL;
  std::size_t node_rank = 0;
  std::size_t node_size = 1;
  NodeShm hier_shm;
  std::vector<int> hier_where;
  std::vector<std::byte> hier_scratch;
  // With op_timeout: what each rank on this node entered last, for the
  // timeout's message (backends/mpi/board.hpp), and this rank's collectives
  // so far (the number it publishes there).
  StatusBoard board;
  std::uint64_t collectives = 0;
  // This communicator's last calls (Options::flight_record_size; null when 0).
  std::unique_ptr<FlightRecorder> flight;
};

}  // namespace detail::mpi

}  // namespace polycoll
