#pragma once
/// @file backends/mpi/policies.hpp
/// Policies of the Mpi backend, chosen at compile time:
/// `polycoll::BasicMpi<polycoll::mpi::Policies<Completion, Reduction>>`.
/// `polycoll::Mpi` is `BasicMpi<mpi::DefaultPolicies>`; docs/mpi.md gives the
/// measurements behind the defaults.

#include <cstddef>

namespace polycoll::mpi {

/// Completion policy: collectives call the blocking MPI function and are
/// complete on return (sync() then only completes send/recv). With
/// Options::op_timeout set they post the MPI_I* form and poll it until the
/// deadline instead, so that they return Errc::timeout rather than hang.
struct blocking {
  /// Collectives block.
  static constexpr bool is_nonblocking = false;
  /// The policy's name in benchmark output.
  static constexpr const char* name = "blocking";
};

/// Completion policy: collectives post the MPI_I* function and return; sync()
/// and barrier() complete them (together with send/recv), bounded by op_timeout.
struct nonblocking {
  /// Collectives are MPI_I* requests completed by sync().
  static constexpr bool is_nonblocking = true;
  /// The policy's name in benchmark output.
  static constexpr const char* name = "nonblocking";
};

/// Reduction-unit policy: MPI's predefined ops wherever MPI has one for the
/// dtype (everything but f16, bf16, f8e4m3, f8e5m2, the sums of 8- and
/// 16-bit integers, the min/max of unsigned integers and of f32/f64, and the
/// products of complex numbers, which always take polycoll's unit as a user
/// MPI_Op; see detail::mpi::builtin_unsafe).
struct builtin_ops {
  /// MPI's predefined op for the dtypes MPI has one for.
  static constexpr bool kernel_for_native = false;
  /// Native dtypes never take polycoll's 2-rank all_reduce algorithms (the
  /// others do: backends/mpi/halving.hpp).
  static constexpr bool halving_for_native = false;
  /// The policy's name in benchmark output.
  static constexpr const char* name = "builtin";
};

/// Reduction-unit policy: polycoll's vectorised host unit (kernels/reduce.hpp)
/// for every dtype, native ones included: as a cached user MPI_Op, and at 2
/// ranks in polycoll's own all_reduce algorithms (backends/mpi/halving.hpp):
/// the exchange for small messages, and on MPICH from 256 KiB the halving,
/// each rank reducing half.
struct kernel_ops {
  /// polycoll's unit for every dtype.
  static constexpr bool kernel_for_native = true;
  /// Native dtypes take the 2-rank algorithms too.
  static constexpr bool halving_for_native = true;
  /// The policy's name in benchmark output.
  static constexpr const char* name = "kernel";
};

/// Reduction-unit policy: polycoll's unit as a user MPI_Op for messages below
/// `kernel_below_bytes`, MPI's predefined op from there on, except where a
/// 2-rank algorithm applies (backends/mpi/halving.hpp: the exchange for
/// small messages, and on MPICH from 256 KiB the halving), which reduces with
/// polycoll's unit; and a 2-rank all_reduce takes MPI's predefined op where
/// it measured faster than every path through polycoll's unit (MPICH, just
/// above 8 KiB to 16 KiB: detail::mpi::predefined_at_2). The reason: on
/// MPICH the user op wins for small messages and the halving exchange for
/// large ones, while MPICH's own user-op path for large messages is slower
/// than its predefined op (docs/mpi.md, "Policies", has the figures).
struct adaptive_ops {
  /// Not for every size: see kernel_below_bytes.
  static constexpr bool kernel_for_native = false;
  /// Native dtypes take the 2-rank algorithms where they apply.
  static constexpr bool halving_for_native = true;
  /// Messages shorter than this many bytes use polycoll's unit.
  static constexpr std::size_t kernel_below_bytes = 128 * 1024;
  /// The policy's name in benchmark output.
  static constexpr const char* name = "adaptive";
};

/// A policy bundle: `completion` and `reduction`.
template <class Completion, class Reduction>
struct Policies {
  /// blocking or nonblocking.
  using completion = Completion;
  /// builtin_ops, kernel_ops or adaptive_ops.
  using reduction = Reduction;
};

/// The policies of polycoll::Mpi (measured: see docs/mpi.md).
using DefaultPolicies = Policies<blocking, adaptive_ops>;

}  // namespace polycoll::mpi
