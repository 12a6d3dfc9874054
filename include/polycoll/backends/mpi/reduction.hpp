#pragma once
// What the Mpi backend's reduction collectives need to know of one
// (dtype, op) pair, as run-time values: its sizes and MPI handles, the
// properties that choose an algorithm, and pointers to the pair's own code
// (the user op body, the division, the rank-order fold). The collectives'
// bodies take a `const Reduction&` and are compiled once; only the little
// code below, and the kernels it points at, is compiled per pair. Compiling
// every body once per pair (72 pairs, each reached by the run-time dispatch
// of the seed surface and AnyCommunicator) was most of a header-only TU's
// compile time and of libpolycoll's. A call pays an indirect call per
// reduction step, which the 2-rank figures in docs/mpi.md include.
// Internal to backends/mpi.hpp.

#include <cstddef>

#include <mpi.h>

#include <polycoll/backends/mpi/halving.hpp>
#include <polycoll/backends/mpi/ordered.hpp>
#include <polycoll/backends/mpi/process.hpp>
#include <polycoll/backends/mpi/requests.hpp>
#include <polycoll/backends/mpi/types.hpp>
#include <polycoll/dtype.hpp>
#include <polycoll/kernels/reduce.hpp>
#include <polycoll/reduce_op.hpp>

namespace polycoll::detail::mpi {

struct Reduction {
  DType dtype;
  ReduceOp op;
  std::size_t size;     // bytes per element
  std::size_t op_slot;  // the pair's slot in the process's cache of user ops (user_op)
  bool always_user_op;  // always_user_op<D, Op>
  bool order_matters;   // order_matters<D, Op>
  bool complex_prod;    // a complex Prod: its bits depend on the operand order even at 2 ranks
  MPI_Datatype (*datatype)() noexcept;
  MPI_User_function* body;              // user_fn<D, Op>: inout = in OP inout (Avg: the Sum step)
  MPI_Op (*user_op)(int& rc) noexcept;  // the cached user MPI_Op of the pair
  // MPI's predefined op where it gives polycoll's result (builtin_unsafe is
  // false), nullptr where the pair always takes the user op.
  MPI_Op (*builtin)() noexcept;
  // x[0, n) /= divisor: Avg only, else nullptr.
  void (*divide)(void* x, std::size_t n, std::size_t divisor) noexcept;
  // fold_ranks: dst = the rank-order fold of the p contributions at base;
  // only where order_matters (else nullptr).
  void (*fold)(void* dst, const void* base, std::size_t stride, std::size_t p, std::size_t len) noexcept;
  void (*divide_finish)(const Finish&) noexcept;    // Avg only, else nullptr
  void (*move_finish)(const Finish&) noexcept;      // the in-place reduce_scatter's (with the division for Avg)
  void (*fold_finish)(const Finish&) noexcept;      // a posted reproducible reduction's; as fold

  [[nodiscard]] bool avg() const noexcept { return op == ReduceOp::Avg; }
};

template <DType D>
void divide_erased(void* x, std::size_t n, std::size_t divisor) noexcept {
  kernels::divide(dtype_tag<D>{}, static_cast<typename dtype_tag<D>::type*>(x), n, divisor);
}

template <DType D, ReduceOp Op>
void fold_erased(void* dst, const void* base, std::size_t stride, std::size_t p, std::size_t len) noexcept {
  using T = typename dtype_tag<D>::type;
  fold_ranks<D, Op>(static_cast<T*>(dst), static_cast<const T*>(base), stride, p, len);
}

template <DType D, ReduceOp Op>
constexpr MPI_Op (*builtin_of() noexcept)() noexcept {
  if constexpr (type_map<D>::builtin_reduction && !builtin_unsafe<D, Op>) {
    return &builtin_op<D, Op>;
  } else {
    return nullptr;
  }
}

// The Avg pairs' division and its Finish; nullptr for every other op (whose
// dtypes may have no division at all).
template <DType D, ReduceOp Op>
constexpr void (*divide_of() noexcept)(void*, std::size_t, std::size_t) noexcept {
  if constexpr (Op == ReduceOp::Avg) {
    return &divide_erased<D>;
  } else {
    return nullptr;
  }
}
template <DType D, ReduceOp Op>
constexpr void (*divide_finish_of() noexcept)(const Finish&) noexcept {
  if constexpr (Op == ReduceOp::Avg) {
    return &divide_finish<D>;
  } else {
    return nullptr;
  }
}

// The rank-order fold and its Finish, which only the pairs whose bits depend
// on the order take (BasicMpi::ordered); nullptr for the others, which then
// instantiate no multi-source kernel.
template <DType D, ReduceOp Op>
constexpr void (*fold_of() noexcept)(void*, const void*, std::size_t, std::size_t, std::size_t) noexcept {
  if constexpr (order_matters<D, Op>) {
    return &fold_erased<D, Op>;
  } else {
    return nullptr;
  }
}
template <DType D, ReduceOp Op>
constexpr void (*fold_finish_of() noexcept)(const Finish&) noexcept {
  if constexpr (order_matters<D, Op>) {
    return &fold_finish<D, Op>;
  } else {
    return nullptr;
  }
}

/// The Reduction of the valid pair (D, Op).
template <DType D, ReduceOp Op>
inline constexpr Reduction reduction_of = {
    D,
    Op,
    size_of(D),
    dtype_index<D>() * reduce_op_count + static_cast<std::size_t>(Op),
    always_user_op<D, Op>,
    order_matters<D, Op>,
    dtype_tag<D>::category == DTypeCategory::complex && Op == ReduceOp::Prod,
    &type_map<D>::datatype,
    &user_fn<D, Op>,
    &user_op<D, Op>,
    builtin_of<D, Op>(),
    divide_of<D, Op>(),
    fold_of<D, Op>(),
    divide_finish_of<D, Op>(),
    &move_finish<D, Op == ReduceOp::Avg>,
    fold_finish_of<D, Op>(),
};

}  // namespace polycoll::detail::mpi
