#pragma once
// The Mpi backend's dtype table: which MPI datatype carries each DType, and
// which built-in MPI_Op implements each (DType, ReduceOp) where MPI has one.
// Internal to backends/mpi.hpp.

#include <complex>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <utility>

#include <mpi.h>

#include <polycoll/dtype.hpp>
#include <polycoll/reduce_op.hpp>

namespace polycoll::detail::mpi {

/// One specialisation per DType. `datatype()` is the MPI datatype that moves
/// the elements (a function, not a constant: Open MPI's handles are addresses
/// of globals). `builtin_reduction` says whether MPI's predefined ops reduce
/// it; the 16- and 8-bit floats travel as unsigned integers of their size and
/// are reduced only by polycoll's user MPI_Ops. Primary left undefined: the
/// completeness check below names a missing entry.
template <DType D>
struct type_map;

#define POLYCOLL_MPI_TYPE(D, MPITYPE, BUILTIN)                         \
  template <>                                                          \
  struct type_map<DType::D> {                                          \
    static MPI_Datatype datatype() noexcept { return MPITYPE; }        \
    static constexpr bool builtin_reduction = BUILTIN;                 \
  }

POLYCOLL_MPI_TYPE(F64, MPI_DOUBLE, true);
POLYCOLL_MPI_TYPE(F32, MPI_FLOAT, true);
POLYCOLL_MPI_TYPE(F16, MPI_UINT16_T, false);
POLYCOLL_MPI_TYPE(BF16, MPI_UINT16_T, false);
POLYCOLL_MPI_TYPE(F8E4M3, MPI_UINT8_T, false);
POLYCOLL_MPI_TYPE(F8E5M2, MPI_UINT8_T, false);
POLYCOLL_MPI_TYPE(I64, MPI_INT64_T, true);
POLYCOLL_MPI_TYPE(I32, MPI_INT32_T, true);
POLYCOLL_MPI_TYPE(I16, MPI_INT16_T, true);
POLYCOLL_MPI_TYPE(I8, MPI_INT8_T, true);
POLYCOLL_MPI_TYPE(U64, MPI_UINT64_T, true);
POLYCOLL_MPI_TYPE(U32, MPI_UINT32_T, true);
POLYCOLL_MPI_TYPE(U16, MPI_UINT16_T, true);
POLYCOLL_MPI_TYPE(U8, MPI_UINT8_T, true);
POLYCOLL_MPI_TYPE(Bool, MPI_C_BOOL, true);  // reduced with MPI_LOR / MPI_LAND
POLYCOLL_MPI_TYPE(C64, MPI_C_FLOAT_COMPLEX, true);
POLYCOLL_MPI_TYPE(C128, MPI_C_DOUBLE_COMPLEX, true);
#undef POLYCOLL_MPI_TYPE

static_assert(sizeof(bool) == 1, "polycoll Mpi: bool must be one byte to travel as MPI_C_BOOL");
static_assert(sizeof(std::complex<float>) == 2 * sizeof(float), "polycoll Mpi: std::complex<float> layout");

template <DType D>
concept mapped = requires {
  { type_map<D>::datatype() } -> std::same_as<MPI_Datatype>;
  type_map<D>::builtin_reduction;
};

// Completeness: every one of the dtype_count DTypes has a table entry.
constexpr bool type_map_complete() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return (mapped<all_dtypes[I]> && ...);
  }(std::make_index_sequence<dtype_count>{});
}
static_assert(type_map_complete(), "polycoll Mpi: type_map must have an entry for every DType");

/// Position of D in all_dtypes (0 .. dtype_count-1): indexes the op cache.
template <DType D>
constexpr std::size_t dtype_index() {
  std::size_t i = 0;
  while (all_dtypes[i] != D) ++i;
  return i;
}

/// True where MPI's predefined op may not give polycoll's result. Those pairs
/// always take polycoll's unit as a user op, whatever the reduction policy,
/// so that a call's result does not depend on its size, the rank count, the
/// policy or the MPI (docs/mpi.md, "Predefined ops that compute wrong
/// results", has the measurements):
/// - Sum of 8- and 16-bit integers, which polycoll defines modulo 2^bits, and
///   which Open MPI 4.1's AVX op component computes with saturating adds
///   (32767 + 1 == 32767: open-mpi/ompi#8045, closed wontfix);
/// - Min and Max of unsigned integers: MPICH 4.0.2 compares MPI_UINT8_T ..
///   MPI_UINT64_T as signed (min(10, 200) on MPI_UINT8_T is 200; min(5,
///   2^63 + 5) on MPI_UINT64_T is 2^63 + 5), and so does Open MPI 4.1.4 for
///   MPI_UNSIGNED_LONG. Not worth a per-MPI exception: polycoll's unit is
///   correct on every MPI;
/// - Min and Max of every floating dtype: polycoll's propagate NaN; MPICH
///   4.0.2's and Open MPI 4.1's MPI_MIN/MPI_MAX return the other operand when
///   the NaN is on one side of their compare, so a NaN of one rank is lost
///   (3 ranks holding NaN, 1, 1: min is 1). Stated for the floating category,
///   not f32/f64 by name, so that f16/bf16/fp8 keep polycoll's unit should
///   they ever map to a native MPI type;
/// - Prod of complex dtypes: polycoll's is the plain formula
///   (kernels/reduce.hpp), both MPIs' the C Annex G product, which differs
///   where the plain one is NaN in both parts ((inf+inf i)(1+0i) is
///   (NaN, NaN) in polycoll and (inf, inf) in MPI).
/// Sum, Avg (MPI_SUM, then polycoll's division) and Prod of the other native
/// pairs agree with polycoll's unit on both MPIs, NaN and infinities included
/// (the summation order aside, which no policy fixes).
template <DType D, ReduceOp Op>
inline constexpr bool builtin_unsafe =
    (Op == ReduceOp::Sum && (D == DType::I8 || D == DType::I16 || D == DType::U8 || D == DType::U16)) ||
    ((Op == ReduceOp::Min || Op == ReduceOp::Max) &&
     (D == DType::U8 || D == DType::U16 || D == DType::U32 || D == DType::U64 ||
      dtype_tag<D>::category == DTypeCategory::floating)) ||
    (Op == ReduceOp::Prod && dtype_tag<D>::category == DTypeCategory::complex);

/// The predefined MPI_Op for (D, Op); Avg is a Sum followed by polycoll's
/// division. Bool takes the logical ops (Sum/Max = or, Prod/Min = and).
template <DType D, ReduceOp Op>
MPI_Op builtin_op() noexcept {
  static_assert(type_map<D>::builtin_reduction, "polycoll Mpi: MPI has no predefined reduction for this dtype");
  if constexpr (D == DType::Bool) {
    return (Op == ReduceOp::Sum || Op == ReduceOp::Max) ? MPI_LOR : MPI_LAND;
  } else if constexpr (Op == ReduceOp::Sum || Op == ReduceOp::Avg) {
    return MPI_SUM;
  } else if constexpr (Op == ReduceOp::Prod) {
    return MPI_PROD;
  } else if constexpr (Op == ReduceOp::Min) {
    return MPI_MIN;
  } else {
    return MPI_MAX;
  }
}

/// True where the blocking MPI_Reduce faults when the root is not rank 0 and
/// passes MPI_IN_PLACE: MPICH (seen with 4.0.2, the Debian 12 package); the Mpi
/// backend then hands it a copy of the root's buffer instead.
#if defined(MPICH_VERSION)
inline constexpr bool in_place_reduce_faults = true;
#else
inline constexpr bool in_place_reduce_faults = false;
#endif

}  // namespace polycoll::detail::mpi
