// libpolycoll: the reduction kernels of every valid (dtype, op) pair, the
// definitions that <polycoll/kernels/reduce.hpp> declares `extern template`.
#define POLYCOLL_DETAIL_BUILDING_LIBRARY 1
#define POLYCOLL_DETAIL_INLINE_KERNELS 1
#include <polycoll/kernels/reduce.hpp>

#include <cstddef>

namespace polycoll::kernels {

namespace {
// The pair list is exactly is_valid: a pair missing from it would be a link
// error in user code, an extra one a static_assert here.
constexpr std::size_t listed_pairs() {
  std::size_t n = 0;
#define POLYCOLL_DETAIL_X(D, Op) n += is_valid(DType::D, ReduceOp::Op) ? 1 : 1000;
  POLYCOLL_DETAIL_FOR_EACH_VALID_PAIR(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X
  return n;
}
constexpr std::size_t valid_pairs() {
  std::size_t n = 0;
  for (DType d : all_dtypes)
    for (std::size_t o = 0; o < reduce_op_count; ++o) n += is_valid(d, static_cast<ReduceOp>(o)) ? 1 : 0;
  return n;
}
static_assert(listed_pairs() == valid_pairs(), "POLYCOLL_DETAIL_FOR_EACH_VALID_PAIR must list every valid pair once");
constexpr bool listed_dtypes() {
  std::size_t n = 0;
  bool all = true;
#define POLYCOLL_DETAIL_X(D) all = all && all_dtypes[n++] == DType::D;
  POLYCOLL_DETAIL_FOR_EACH_DTYPE(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X
  return all && n == dtype_count;
}
static_assert(listed_dtypes(), "POLYCOLL_DETAIL_FOR_EACH_DTYPE must list every dtype once, in all_dtypes' order");
}  // namespace

#define POLYCOLL_DETAIL_X(D, Op) POLYCOLL_DETAIL_KERNEL_PAIR(, D, Op)
POLYCOLL_DETAIL_FOR_EACH_VALID_PAIR(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X
#define POLYCOLL_DETAIL_X(D) POLYCOLL_DETAIL_KERNEL_DIVIDE(, D)
POLYCOLL_DETAIL_FOR_EACH_AVG_DTYPE(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X

}  // namespace polycoll::kernels
