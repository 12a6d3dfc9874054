#pragma once
/// @file backends/mpi/ordered.hpp
/// The rank-order reductions of Options::reproducible (internal to
/// backends/mpi.hpp). At 3 or more ranks MPI's own reductions combine the
/// ranks' contributions in an order of MPI's choosing (a tree, recursive
/// doubling, a ring), which changes with the MPI, the world size and the
/// message size, so floating-point results differ in their last bits from
/// Threads' rank-order fold and between MPIs. With Options::reproducible the
/// Mpi reductions instead move the data with MPI and fold it with polycoll's
/// unit, left to right in rank order:
///
///   result = ((x_0 OP x_1) OP x_2) ... OP x_{p-1}   (then / p for Avg)
///
/// exactly what Threads computes at every size, so every backend and every
/// algorithm gives the same bits. Only the pairs whose bits depend on the
/// order take this path (order_matters: floating and complex sums, products,
/// averages); at 1 and 2 ranks every existing path is already that fold (one
/// binary step per element, and IEEE sum and product commute), so nothing
/// changes there, except for complex products at 2 (an FMA-contracted
/// product does not commute: BasicMpi::ordered()). The data movement, by collective:
///
/// - all_reduce, gathered bytes (world size x message) up to
///   ordered_gather_to_bytes, and at every size under the nonblocking policy
///   or with op_timeout: one MPI_Allgather of the whole buffers, then every
///   rank folds all of them (one collective, so that it can be posted, and a
///   timed-out call is one pending collective that a later sync() completes);
/// - all_reduce above it otherwise: MPI_Alltoallv hands rank r block r of
///   every rank's buffer, rank r folds its block, MPI_Allgather shares the
///   folded blocks (each rank receives and folds 1/p of the data, as a
///   reduce-scatter + all-gather does);
/// - reduce: the same paths with MPI_Gather to the root;
/// - reduce_scatter: MPI_Alltoall of the blocks, then each rank folds its own.
///
/// The figures that set the threshold and the cost against MPI's own
/// reductions are in docs/benchmarks.md ("Reproducible reductions").

#include <cstddef>

#include <polycoll/backends/mpi/requests.hpp>
#include <polycoll/detail/std_parts.hpp>
#include <polycoll/dtype.hpp>
#include <polycoll/kernels/reduce.hpp>
#include <polycoll/reduce_op.hpp>

namespace polycoll::detail::mpi {

/// Gathered bytes (world size x message bytes) up to which a reproducible
/// all_reduce or reduce gathers whole buffers (one collective) instead of
/// exchanging blocks (two collectives, 1/p of the data folded per rank).
inline constexpr std::size_t ordered_gather_to_bytes = 64 * 1024;

/// The length of the blocks `n` elements split over `p` ranks: ceil(n / p),
/// one length for every block so that the folded blocks travel with
/// MPI_Allgather (the last blocks are shorter, or empty, and padded).
constexpr std::size_t block_length(std::size_t n, std::size_t p) noexcept { return n / p + (n % p != 0 ? 1 : 0); }

/// Block `b` of `n` elements split over `p` ranks: [lo, lo + len).
struct Block {
  std::size_t lo = 0;
  std::size_t len = 0;
};

constexpr Block block_of(std::size_t n, std::size_t p, std::size_t b) noexcept {
  const std::size_t lo = std::min(b * block_length(n, p), n);
  return {lo, std::min(block_length(n, p), n - lo)};
}

/// True where MPI's choice of order can change a reduction's bits: sums,
/// products and averages of floating and complex dtypes (their rounding
/// depends on how the operands associate). Integer and bool arithmetic is
/// exact (modulo 2^bits), and polycoll's min/max are order-free, -0 < +0
/// included (kernels/reduce.hpp; which NaN payload survives is unspecified on
/// every path), so those pairs keep MPI's own reductions.
template <DType D, ReduceOp Op>
inline constexpr bool order_matters =
    (dtype_tag<D>::category == DTypeCategory::floating || dtype_tag<D>::category == DTypeCategory::complex) &&
    Op != ReduceOp::Min && Op != ReduceOp::Max;

/// dst[i] = ((s_0[i] OP s_1[i]) OP s_2[i]) ... OP s_{p-1}[i], then / p for
/// Avg, where s_q = base + q * stride: the contributions of ranks 0..p-1 laid
/// out one after another; dst must not overlap them. Cannot fail: above 64
/// ranks the fold goes on in passes of 63 more sources into dst (dst first,
/// so the order and every rounding step are the same), and Avg sums and
/// divides once at the end, as combine_n does.
template <DType D, ReduceOp Op, class T>
void fold_ranks(T* dst, const T* base, std::size_t stride, std::size_t p, std::size_t len) noexcept {
  constexpr std::size_t most = 64;
  // Untyped: the instantiation every backend's fold shares.
  const void* srcs[most] = {};  // zeroed: GCC 12 cannot see that the loops below fill what is read
  void* const out = dst;
  if (p <= most) {
    for (std::size_t q = 0; q < p; ++q) srcs[q] = base + q * stride;
    kernels::combine_n(dtype_tag<D>{}, op_tag<Op>{}, out, srcs, p, len, p);
    return;
  }
  constexpr ReduceOp step = Op == ReduceOp::Avg ? ReduceOp::Sum : Op;
  for (std::size_t q = 0; q < p;) {
    std::size_t k = 0;
    if (q != 0) srcs[k++] = dst;
    while (k < most && q < p) srcs[k++] = base + q++ * stride;
    kernels::combine_n(dtype_tag<D>{}, op_tag<step>{}, out, srcs, k, len);
  }
  if constexpr (Op == ReduceOp::Avg) kernels::divide(dtype_tag<D>{}, dst, len, p);
}

/// The Finish of a posted reproducible reduction: fold the p gathered
/// contributions at `src` (f.count elements each, p = f.divisor) into `dst`.
template <DType D, ReduceOp Op>
void fold_finish(const Finish& f) noexcept {
  using T = typename dtype_tag<D>::type;
  fold_ranks<D, Op>(static_cast<T*>(f.dst), static_cast<const T*>(f.src), f.count, f.divisor, f.count);
}

}  // namespace polycoll::detail::mpi
