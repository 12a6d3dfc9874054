#pragma once
/// @file backends/mpi/halving.hpp
/// The Mpi backend's own point-to-point all_reduce algorithms for 2 ranks
/// (internal to backends/mpi.hpp), used by the blocking policy without
/// op_timeout for the reductions that go through polycoll's unit (f16, bf16,
/// fp8, the sums of 8- and 16-bit integers, unsigned min/max; native dtypes
/// under mpi::kernel_ops and mpi::adaptive_ops) where the shared-memory window
/// of backends/mpi/shm.hpp does not apply: ranks on different nodes, and
/// messages above its 4 MiB. Two of them, by size:
///
/// - The exchange, for small messages (up to exchange_to_bytes): one
///   MPI_Sendrecv of the whole buffer, then each rank reduces the two
///   operands locally, in the same operand order on both ranks, so both get
///   bit-identical results (NaN payloads included). MPI's own allreduce moves
///   the same bytes at 2 ranks (recursive doubling) with more work per call
///   (Open MPI 4.1's profile shows a malloc and free of a temporary buffer in
///   every call), so the exchange is faster than MPI_Allreduce with the same
///   user op on both MPIs (docs/mpi.md, "The 2-rank exchange", has the
///   figures). Beyond Open MPI's shared-memory eager limit (4 KiB) the
///   rendezvous protocol makes it slower, hence its lower threshold there.
/// - The halving, for large messages on MPICH (from halving_from_bytes). With
///   a user MPI_Op, MPICH 4.0 always runs recursive doubling (its
///   reduce-scatter + allgather algorithm is reserved for predefined ops), so
///   at 2 ranks each rank receives the peer's whole buffer and reduces all n
///   elements. Exchanging halves instead, each rank reducing its own half with
///   polycoll's unit and the reduced halves exchanged back, moves the same
///   bytes per rank (n), does half the reduction work, and costs one more
///   message round, so it pays where the reduction work outweighs a round's
///   latency: large messages (docs/mpi.md, "Idle machine: the halving
///   adopted" has the figures). Open MPI 4.1 already splits the work of a
///   commutative user op at these sizes: the halving gains nothing there and
///   is not used.
///
/// Both run on the communicator's own dup (CommState::pair_comm), so their
/// point-to-point messages never match the user's send/recv.

#include <cstddef>
#include <cstring>
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

/// Bytes of the whole buffer up to which 2-rank reductions through polycoll's
/// unit take the exchange (0: never). Open MPI: below its shared-memory eager
/// limit (4 KiB, where the rendezvous makes the exchange slower), with margin;
/// MPICH: up to 8 KiB, where the exchange is still faster than MPI_Allreduce
/// (from 9 to 16 KiB MPICH's predefined op is faster than any user-op path:
/// predefined_at_2). docs/mpi.md, "The 2-rank exchange", has the figures.
#if defined(MPICH_VERSION)
inline constexpr std::size_t exchange_to_bytes = 8 * 1024;
#elif defined(OMPI_MAJOR_VERSION)
inline constexpr std::size_t exchange_to_bytes = 2 * 1024;
#else
inline constexpr std::size_t exchange_to_bytes = 0;
#endif
static_assert(exchange_to_bytes < halving_from_bytes);

/// True where, at 2 ranks, MPI's predefined op beats every path through
/// polycoll's unit for a native dtype, so mpi::adaptive_ops takes it below
/// its threshold too. MPICH 4.0 from just above 8 KiB to 16 KiB: there its
/// MPI_Allreduce with a predefined op is faster than with a user op or the
/// exchange; at 8 KiB and from 17 KiB the user op is faster (docs/mpi.md,
/// "The 2-rank exchange").
constexpr bool predefined_at_2([[maybe_unused]] std::size_t bytes) noexcept {
#if defined(MPICH_VERSION)
  return bytes > exchange_to_bytes && bytes <= 16 * 1024;
#else
  return false;
#endif
}

/// True for the (D, Op) pairs that always reduce through polycoll's user op,
/// whatever the reduction policy.
template <DType D, ReduceOp Op>
inline constexpr bool always_user_op = !type_map<D>::builtin_reduction || builtin_unsafe<D, Op>;

/// How a 2-rank algorithm splits `count` elements: rank 0 owns the first
/// count / 2, rank 1 the rest; `other` is the peer's part.
struct Halves {
  std::size_t mine, mine_n, other, other_n;
};
constexpr Halves halves_of(std::size_t count, std::size_t rank) noexcept {
  const std::size_t half = count / 2;
  return rank == 0 ? Halves{0, half, half, count - half} : Halves{half, count - half, 0, half};
}

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
/// `fn` is the pair's user op body (user_fn<D, Op>), `es` its element size
/// and `dt` its MPI datatype: one body serves every pair.
inline int halving_allreduce_2(MPI_User_function* fn, std::size_t es, MPI_Datatype dt, void* buf, std::size_t count,
                               std::size_t rank, MPI_Comm comm, std::vector<std::byte>& scratch) noexcept {
  const auto [mine, mine_n, other, other_n] = halves_of(count, rank);
  if (scratch.size() < mine_n * es) {
    try {
      scratch.resize(mine_n * es);
    } catch (const std::bad_alloc&) {
      return MPI_ERR_NO_MEM;
    }
  }
  auto* b = static_cast<std::byte*>(buf);
  const int peer = rank == 0 ? 1 : 0;
  // The peer's copy of this rank's half into scratch; this rank's copy of the
  // peer's half to the peer. Tag 0 then 1: the two rounds cannot cross-match.
  int rc = MPI_Sendrecv(b + other * es, static_cast<int>(other_n), dt, peer, 0, scratch.data(),
                        static_cast<int>(mine_n), dt, peer, 0, comm, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) return rc;
  int len = static_cast<int>(mine_n);
  fn(scratch.data(), b + mine * es, &len, nullptr);
  return MPI_Sendrecv(b + mine * es, static_cast<int>(mine_n), dt, peer, 1, b + other * es,
                      static_cast<int>(other_n), dt, peer, 1, comm, MPI_STATUS_IGNORE);
}

/// The same for the pair (D, Op).
template <DType D, ReduceOp Op>
int halving_allreduce_2(void* buf, std::size_t count, std::size_t rank, MPI_Comm comm,
                        std::vector<std::byte>& scratch) noexcept {
  return halving_allreduce_2(&user_fn<D, Op>, size_of(D), type_map<D>::datatype(), buf, count, rank, comm, scratch);
}

/// In-place all_reduce of `count` (> 0, count * size_of(D) <=
/// exchange_to_bytes) elements of D over the 2-rank `comm` (this rank is
/// `rank`), reducing through user_fn<D, Op> (Avg: the Sum step only, the
/// caller divides): the whole buffer swapped with one MPI_Sendrecv into a
/// stack buffer, then both ranks compute user_fn(in = rank 1's operand,
/// inout = rank 0's operand), rank 1 into the stack buffer and copying it back,
/// so the results are bit-identical. Returns MPI_SUCCESS or an MPI error code.
/// `fn`, `es` and `dt` as for halving_allreduce_2.
inline int exchange_allreduce_2(MPI_User_function* fn, std::size_t es, MPI_Datatype dt, void* buf, std::size_t count,
                                std::size_t rank, MPI_Comm comm) noexcept {
  alignas(64) std::byte peer_buf[exchange_to_bytes > 0 ? exchange_to_bytes : 1];
  const std::size_t bytes = count * es;
  const int n = static_cast<int>(count);
  const int rc = MPI_Sendrecv(buf, n, dt, rank == 0 ? 1 : 0, 2, peer_buf, n, dt, rank == 0 ? 1 : 0, 2, comm,
                              MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) return rc;
  int len = n;
  if (rank == 0) {
    fn(peer_buf, buf, &len, nullptr);
  } else {
    fn(buf, peer_buf, &len, nullptr);
    std::memcpy(buf, peer_buf, bytes);
  }
  return MPI_SUCCESS;
}

/// The same for the pair (D, Op).
template <DType D, ReduceOp Op>
int exchange_allreduce_2(void* buf, std::size_t count, std::size_t rank, MPI_Comm comm) noexcept {
  return exchange_allreduce_2(&user_fn<D, Op>, size_of(D), type_map<D>::datatype(), buf, count, rank, comm);
}

}  // namespace polycoll::detail::mpi
