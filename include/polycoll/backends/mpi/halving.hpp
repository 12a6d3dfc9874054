#pragma once
// The Mpi backend's own allreduce for 2 ranks, used by the blocking policy for
// large reductions that only polycoll's unit can do (f16, bf16, fp8, the sums
// of 8- and 16-bit integers). Internal to backends/mpi.hpp.
//
// Why: with a user MPI_Op both MPICH 4.0 and Open MPI 4.1 run the whole
// reduction on every rank (MPICH: recursive doubling, one exchange of the
// full buffer, then n elements reduced per rank). Exchanging halves instead,
// each rank reducing its own half with polycoll's unit and the reduced halves
// exchanged back, moves the same bytes per rank (n), does half the reduction
// work, and costs one more message round; measured at 2 ranks (docs/mpi.md,
// "Halving for user-op dtypes") it is faster from 1 MiB up on both MPIs and
// slower at 64 KiB, hence the threshold.

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include <mpi.h>

#include <polycoll/backends/mpi/process.hpp>
#include <polycoll/dtype.hpp>
#include <polycoll/reduce_op.hpp>

namespace polycoll::detail::mpi {

/// Bytes of the whole buffer from which 2-rank user-op reductions take the
/// halving exchange. Between the measured 64 KiB (MPI's own allreduce faster)
/// and 1 MiB (halving faster on MPICH and Open MPI).
inline constexpr std::size_t halving_from_bytes = 256 * 1024;

/// True for the (D, Op) pairs that always reduce through polycoll's user op,
/// whatever the reduction policy: the ones halving serves.
template <DType D, ReduceOp Op>
inline constexpr bool always_user_op = !type_map<D>::builtin_reduction || builtin_unsafe<D, Op>;

/// In-place allreduce of `count` elements of D over the 2-rank `comm` (this
/// rank is `rank`), reducing through user_fn<D, Op> (Avg: the Sum step only).
/// Rank 0 owns the first count/2 elements, rank 1 the rest. `scratch` grows to
/// one half and is kept for the next call, so a steady-state call allocates
/// nothing. Returns MPI_SUCCESS, an MPI error code, or MPI_ERR_NO_MEM when the
/// scratch cannot grow; the peer is then left in the exchange, as it is when
/// an MPI library's own per-call temporary buffer cannot be allocated (the
/// choice of algorithm cannot depend on one rank's memory without a message
/// more per call). Every rank gets bit-identical results: each half is reduced
/// once, on its owner.
template <DType D, ReduceOp Op>
int halving_allreduce_2(void* buf, std::size_t count, std::size_t rank, MPI_Comm comm,
                        std::vector<std::byte>& scratch) noexcept {
  constexpr std::size_t es = size_of(D);
  const std::size_t half = count / 2;
  const std::size_t mine = rank == 0 ? 0 : half;
  const std::size_t mine_n = rank == 0 ? half : count - half;
  const std::size_t other = rank == 0 ? half : 0;
  const std::size_t other_n = count - mine_n;
  if (scratch.size() < mine_n * es) {
    try {
      scratch.resize(mine_n * es);
    } catch (const std::bad_alloc&) {
      return MPI_ERR_NO_MEM;
    }
  }
  const MPI_Datatype dt = type_map<D>::datatype();
  auto* b = static_cast<std::byte*>(buf);
  const int peer = rank == 0 ? 1 : 0;
  // The peer's copy of this rank's half into scratch; this rank's copy of the
  // peer's half to the peer. Tag 0 then 1: the two rounds cannot cross-match.
  int rc = MPI_Sendrecv(b + other * es, static_cast<int>(other_n), dt, peer, 0, scratch.data(),
                        static_cast<int>(mine_n), dt, peer, 0, comm, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) return rc;
  int len = static_cast<int>(mine_n);
  user_fn<D, Op>(scratch.data(), b + mine * es, &len, nullptr);
  return MPI_Sendrecv(b + mine * es, static_cast<int>(mine_n), dt, peer, 1, b + other * es,
                      static_cast<int>(other_n), dt, peer, 1, comm, MPI_STATUS_IGNORE);
}

}  // namespace polycoll::detail::mpi
