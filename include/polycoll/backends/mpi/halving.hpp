#pragma once
/// @file backends/mpi/halving.hpp
/// The Mpi backend's own all_reduce for 2 ranks on MPICH (internal to
/// backends/mpi.hpp): used by the blocking policy, without op_timeout, for
/// large reductions that go through polycoll's unit (f16, bf16, fp8, the sums
/// of 8- and 16-bit integers; every dtype under mpi::kernel_ops).
///
/// Why: with a user MPI_Op, MPICH 4.0 always runs recursive doubling (its
/// reduce-scatter + allgather algorithm is reserved for predefined ops), so at
/// 2 ranks each rank receives the peer's whole buffer and reduces all n
/// elements. Exchanging halves instead, each rank reducing its own half with
/// polycoll's unit and the reduced halves exchanged back, moves the same bytes
/// per rank (n), does half the reduction work, and costs one more message
/// round. Measured at 2 ranks on an idle machine (docs/mpi.md, "Idle machine,
/// 2026-12-03"): bf16 at 1 MiB 0.49-0.55 and at 16 MiB 0.41-0.56 of the f32
/// MPI_Allreduce, against 0.54-0.70 for MPI_Allreduce with the same op in the
/// same rounds; f32 under kernel_ops 0.94 at 16 MiB instead of 1.18. Open
/// MPI 4.1 already splits the work of a commutative user op at these sizes:
/// the halving gains nothing there and is not used.

#include <cstddef>
#include <new>
#include <vector>

#include <mpi.h>

#include <polycoll/backends/mpi/process.hpp>
#include <polycoll/backends/mpi/types.hpp>
#include <polycoll/dtype.hpp>
#include <polycoll/reduce_op.hpp>

namespace polycoll::detail::mpi {

/// Bytes of the whole buffer from which 2-rank reductions through polycoll's
/// unit take the halving exchange: between 64 KiB (MPI's own allreduce as fast:
/// one round instead of two) and 1 MiB (halving faster).
inline constexpr std::size_t halving_from_bytes = 256 * 1024;

/// The MPI library is MPICH or a derivative (the halving is for its user-op
/// algorithm; see the file comment).
#if defined(MPICH_VERSION)
inline constexpr bool halving_mpi = true;
#else
inline constexpr bool halving_mpi = false;
#endif

/// True for the (D, Op) pairs that always reduce through polycoll's user op,
/// whatever the reduction policy.
template <DType D, ReduceOp Op>
inline constexpr bool always_user_op = !type_map<D>::builtin_reduction || builtin_unsafe<D, Op>;

/// In-place all_reduce of `count` elements of D over the 2-rank `comm` (this
/// rank is `rank`), reducing through user_fn<D, Op> (Avg: the Sum step only,
/// the caller divides). Rank 0 owns the first count/2 elements, rank 1 the
/// rest. `scratch` grows to one half and is kept for the next call, so a
/// steady-state call allocates nothing. Returns MPI_SUCCESS, an MPI error
/// code, or MPI_ERR_NO_MEM when the scratch cannot grow; the peer is then left
/// in the exchange, as it is when an MPI library's own per-call temporary
/// buffer cannot be allocated (the choice of algorithm cannot depend on one
/// rank's memory without a message more per call). Every rank gets
/// bit-identical results: each half is reduced once, on its owner.
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
