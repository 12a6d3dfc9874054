#pragma once
// The Nccl backend's dtype table: which ncclDataType_t carries each DType, how
// many of those make one element, and how (if at all) NCCL reduces it. The
// static rewrites live here and nowhere else:
//   C64 / C128   Sum, Avg      as pairs of F32 / F64 (element-wise, so exact)
//   Bool         Sum/Max, Prod/Min as U8 max / min (bools are 0 or 1)
//   I16 / U16    moved as bytes; NCCL has no 16-bit integer type, so no reductions
//   F8E4M3 / F8E5M2  every op but Avg: NCCL rejects ncclAvg on its fp8 types
//                (ncclInvalidArgument at the call, which leaves the communicator in error)
// Internal to backends/nccl.hpp.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <utility>

#include <nccl.h>

#include <polycoll/dtype.hpp>
#include <polycoll/reduce_op.hpp>

namespace polycoll::detail::nccl {

/// How NCCL reduces a DType.
enum class Reduce : std::uint8_t {
  none,          ///< moved only (no NCCL type of that kind)
  native,        ///< every op valid for the DType, with NCCL's own op
  complex_pair,  ///< Sum and Avg element-wise on the real type; Prod is not element-wise
  bool_as_u8,    ///< or = max, and = min on 0/1 bytes
  no_avg,        ///< NCCL's own ops except ncclAvg, which NCCL refuses for the type
};

/// One specialisation per DType: `type` (the NCCL datatype), `scale` (NCCL
/// elements per polycoll element) and `reduce`. Primary left undefined: the
/// completeness check below names a missing entry.
template <DType D>
struct type_map;

#define POLYCOLL_NCCL_TYPE(D, TYPE, SCALE, REDUCE)                 \
  template <>                                                      \
  struct type_map<DType::D> {                                      \
    static constexpr ncclDataType_t type = TYPE;                   \
    static constexpr std::size_t scale = SCALE;                    \
    static constexpr Reduce reduce = Reduce::REDUCE;               \
  }

POLYCOLL_NCCL_TYPE(F64, ncclFloat64, 1, native);
POLYCOLL_NCCL_TYPE(F32, ncclFloat32, 1, native);
POLYCOLL_NCCL_TYPE(F16, ncclFloat16, 1, native);
POLYCOLL_NCCL_TYPE(BF16, ncclBfloat16, 1, native);
POLYCOLL_NCCL_TYPE(F8E4M3, ncclFloat8e4m3, 1, no_avg);  // reductions need sm_90 or newer (NCCL's rule)
POLYCOLL_NCCL_TYPE(F8E5M2, ncclFloat8e5m2, 1, no_avg);
POLYCOLL_NCCL_TYPE(I64, ncclInt64, 1, native);
POLYCOLL_NCCL_TYPE(I32, ncclInt32, 1, native);
POLYCOLL_NCCL_TYPE(I16, ncclUint8, 2, none);
POLYCOLL_NCCL_TYPE(I8, ncclInt8, 1, native);
POLYCOLL_NCCL_TYPE(U64, ncclUint64, 1, native);
POLYCOLL_NCCL_TYPE(U32, ncclUint32, 1, native);
POLYCOLL_NCCL_TYPE(U16, ncclUint8, 2, none);
POLYCOLL_NCCL_TYPE(U8, ncclUint8, 1, native);
POLYCOLL_NCCL_TYPE(Bool, ncclUint8, 1, bool_as_u8);
POLYCOLL_NCCL_TYPE(C64, ncclFloat32, 2, complex_pair);
POLYCOLL_NCCL_TYPE(C128, ncclFloat64, 2, complex_pair);
#undef POLYCOLL_NCCL_TYPE

template <DType D>
concept mapped = requires {
  { type_map<D>::type } -> std::convertible_to<ncclDataType_t>;
  { type_map<D>::scale } -> std::convertible_to<std::size_t>;
  { type_map<D>::reduce } -> std::convertible_to<Reduce>;
};

// Completeness: every DType has an entry, each entry names a real NCCL type
// (below ncclNumTypes) and moves exactly the bytes of the element.
template <DType D>
constexpr bool entry_ok() {
  if constexpr (!mapped<D>) {
    return false;
  } else {
    constexpr auto t = static_cast<int>(type_map<D>::type);
    constexpr std::size_t nccl_size = t == ncclFloat64 || t == ncclInt64 || t == ncclUint64   ? 8
                                      : t == ncclFloat32 || t == ncclInt32 || t == ncclUint32 ? 4
                                      : t == ncclFloat16 || t == ncclBfloat16                 ? 2
                                                                                              : 1;
    return t >= 0 && t < static_cast<int>(ncclNumTypes) &&
           nccl_size * type_map<D>::scale == sizeof(typename dtype_tag<D>::type);
  }
}
constexpr bool type_map_complete() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return (entry_ok<all_dtypes[I]>() && ...);
  }(std::make_index_sequence<dtype_count>{});
}
static_assert(type_map_complete(),
              "polycoll Nccl: type_map needs an entry for every DType, moving exactly its bytes");

/// Whether NCCL reduces D with Op (after the rewrites above).
template <DType D, ReduceOp Op>
inline constexpr bool reducible = [] {
  if constexpr (!is_valid_v<D, Op>) {
    return false;
  } else {
    switch (type_map<D>::reduce) {
      case Reduce::native: return true;
      case Reduce::no_avg: return Op != ReduceOp::Avg;
      case Reduce::complex_pair: return Op == ReduceOp::Sum || Op == ReduceOp::Avg;
      case Reduce::bool_as_u8: return Op != ReduceOp::Avg;
      case Reduce::none: return false;
    }
    return false;
  }
}();

/// The NCCL op for (D, Op); only for reducible pairs.
template <DType D, ReduceOp Op>
constexpr ncclRedOp_t red_op() noexcept {
  static_assert(reducible<D, Op>, "polycoll Nccl: no NCCL reduction for this (dtype, op)");
  if constexpr (type_map<D>::reduce == Reduce::bool_as_u8) {
    return (Op == ReduceOp::Sum || Op == ReduceOp::Max) ? ncclMax : ncclMin;
  } else if constexpr (Op == ReduceOp::Sum) {
    return ncclSum;
  } else if constexpr (Op == ReduceOp::Prod) {
    return ncclProd;
  } else if constexpr (Op == ReduceOp::Min) {
    return ncclMin;
  } else if constexpr (Op == ReduceOp::Max) {
    return ncclMax;
  } else {
    return ncclAvg;
  }
}

}  // namespace polycoll::detail::nccl
