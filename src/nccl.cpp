// libpolycoll: the members of Nccl, its seed surface and its calls for every
// dtype and every (dtype, op) pair NCCL reduces, which
// <polycoll/backends/nccl.hpp> declares; AnyCommunicator's table for Nccl
// calls them. A user TU of the compiled mode sees only the declarations, so
// each member template its typed calls reach is instantiated here.
#define POLYCOLL_DETAIL_BUILDING_LIBRARY 1
#define POLYCOLL_DETAIL_DEFINE_NCCL 1
#include <polycoll/backends/nccl.hpp>
#include <polycoll/kernels/reduce.hpp>  // the pair lists

#include <cstddef>
#include <utility>

template class polycoll::Communicator<polycoll::Nccl>;
template const polycoll::AnyCommunicator::VTable& polycoll::AnyCommunicator::vtable_of<polycoll::Nccl>() noexcept;

// Every pair detail::nccl::reducible accepts, as X(D, Op): the valid pairs
// (POLYCOLL_DETAIL_FOR_EACH_VALID_PAIR) less I16 and U16 (moved as bytes),
// complex Prod and fp8 Avg. Checked against reducible below.
#define POLYCOLL_DETAIL_NCCL_PAIRS_4(X, D) X(D, Sum) X(D, Prod) X(D, Min) X(D, Max)
#define POLYCOLL_DETAIL_FOR_EACH_NCCL_PAIR(X)                                                              \
  POLYCOLL_DETAIL_PAIRS_ALL5(X, F64) POLYCOLL_DETAIL_PAIRS_ALL5(X, F32) POLYCOLL_DETAIL_PAIRS_ALL5(X, F16) \
  POLYCOLL_DETAIL_PAIRS_ALL5(X, BF16) POLYCOLL_DETAIL_NCCL_PAIRS_4(X, F8E4M3)                             \
  POLYCOLL_DETAIL_NCCL_PAIRS_4(X, F8E5M2) POLYCOLL_DETAIL_NCCL_PAIRS_4(X, I64)                            \
  POLYCOLL_DETAIL_NCCL_PAIRS_4(X, I32) POLYCOLL_DETAIL_NCCL_PAIRS_4(X, I8)                                \
  POLYCOLL_DETAIL_NCCL_PAIRS_4(X, U64) POLYCOLL_DETAIL_NCCL_PAIRS_4(X, U32)                               \
  POLYCOLL_DETAIL_NCCL_PAIRS_4(X, U8) POLYCOLL_DETAIL_NCCL_PAIRS_4(X, Bool) X(C64, Sum) X(C64, Avg)      \
  X(C128, Sum) X(C128, Avg)

namespace polycoll {

namespace {
// The list is exactly detail::nccl::reducible: a pair missing from it would
// be a link error in user code, an extra one a static_assert in red_op.
constexpr std::size_t listed_pairs() {
  std::size_t n = 0;
#define POLYCOLL_DETAIL_X(D, Op) n += detail::nccl::reducible<DType::D, ReduceOp::Op> ? 1 : 1000;
  POLYCOLL_DETAIL_FOR_EACH_NCCL_PAIR(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X
  return n;
}
template <std::size_t... I>
constexpr std::size_t reducible_pairs(std::index_sequence<I...>) {
  std::size_t n = 0;
  (([&] {
     constexpr DType d = all_dtypes[I];
     n += detail::nccl::reducible<d, ReduceOp::Sum> + detail::nccl::reducible<d, ReduceOp::Prod> +
          detail::nccl::reducible<d, ReduceOp::Min> + detail::nccl::reducible<d, ReduceOp::Max> +
          detail::nccl::reducible<d, ReduceOp::Avg>;
   }()),
   ...);
  return n;
}
static_assert(reduce_op_count == 5, "reducible_pairs lists one term per ReduceOp");
static_assert(listed_pairs() == reducible_pairs(std::make_index_sequence<dtype_count>{}),
              "POLYCOLL_DETAIL_FOR_EACH_NCCL_PAIR must list every pair NCCL reduces once");
}  // namespace

// What the front end reaches beyond the common list (detail/linkage.hpp):
// the out-of-place all_reduce and the value form.
#define POLYCOLL_DETAIL_NCCL_EXTRA(D, Op)                                                                         \
  template Status Nccl::all_reduce_impl(dtype_tag<DType::D>, op_tag<ReduceOp::Op>, const dtype_tag<DType::D>::type*, \
                                        dtype_tag<DType::D>::type*, std::size_t);                                  \
  template Status Nccl::all_reduce_value_impl(dtype_tag<DType::D>, op_tag<ReduceOp::Op>, dtype_tag<DType::D>::type*);

#define POLYCOLL_DETAIL_X(D, Op) POLYCOLL_DETAIL_BACKEND_PAIR(, Nccl, D, Op) POLYCOLL_DETAIL_NCCL_EXTRA(D, Op)
POLYCOLL_DETAIL_FOR_EACH_NCCL_PAIR(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X
#define POLYCOLL_DETAIL_X(D) POLYCOLL_DETAIL_BACKEND_DTYPE(, Nccl, D)
POLYCOLL_DETAIL_FOR_EACH_DTYPE(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X

}  // namespace polycoll
