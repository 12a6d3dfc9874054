#pragma once
/// @file reduce_op.hpp
/// Reduction operators: the run-time ReduceOp, compile-time op_tag, the
/// `polycoll::op::sum` ... `polycoll::op::avg` constants (also `polycoll::sum` ...),
/// and the validity matrix.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include <polycoll/dtype.hpp>

namespace polycoll {

/// Reduction operator. Avg is Sum followed by a division by the world size.
enum class ReduceOp : std::uint8_t { Sum = 0, Prod = 1, Min = 2, Max = 3, Avg = 4 };

/// Number of ReduceOp enumerators.
inline constexpr std::size_t reduce_op_count = 5;

/// Every ReduceOp, in discriminant order.
inline constexpr std::array<ReduceOp, reduce_op_count> all_reduce_ops = {ReduceOp::Sum, ReduceOp::Prod,
                                                                        ReduceOp::Min, ReduceOp::Max,
                                                                        ReduceOp::Avg};

/// Compile-time tag of a ReduceOp; pass `polycoll::op::sum` (or `polycoll::sum`) etc. to the typed API.
template <ReduceOp Op>
struct op_tag {
  /// The ReduceOp this tag stands for.
  static constexpr ReduceOp value = Op;
};

/// The op constants. `polycoll::op::min` is the canonical spelling: it
/// cannot collide with `std::min`, whatever using-directives are in scope.
namespace op {
inline constexpr op_tag<ReduceOp::Sum> sum{};   ///< element-wise sum (logical or on bool)
inline constexpr op_tag<ReduceOp::Prod> prod{}; ///< element-wise product (logical and on bool)
inline constexpr op_tag<ReduceOp::Min> min{};   ///< element-wise minimum (logical and on bool)
inline constexpr op_tag<ReduceOp::Max> max{};   ///< element-wise maximum (logical or on bool)
inline constexpr op_tag<ReduceOp::Avg> avg{};   ///< element-wise mean over ranks (floating and complex)
}  // namespace op

// The flat names `polycoll::sum` ... `polycoll::avg`, the same objects as
// op::sum ... op::avg. A TU with both `using namespace std;` and `using
// namespace polycoll;` sees two `min`s and two `max`s, and an unqualified
// `min(a, b)` there is ambiguous: defining POLYCOLL_NO_FLAT_OP_NAMES before
// the first polycoll include leaves only the op:: names (docs/design.md).
#if !defined(POLYCOLL_NO_FLAT_OP_NAMES)
using op::sum;
using op::prod;
using op::min;
using op::max;
using op::avg;
#endif

/// True for op_tag<Op>.
template <class T>
inline constexpr bool is_op_tag_v = false;
/// op_tag<Op> is a tag.
template <ReduceOp Op>
inline constexpr bool is_op_tag_v<op_tag<Op>> = true;

/// True when `op` is one of the five enumerators.
[[nodiscard]] constexpr bool is_known(ReduceOp op) noexcept {
  return static_cast<std::uint8_t>(op) < reduce_op_count;
}

/// "sum", "prod", "min", "max", "avg"; "unknown" for a value that is not an enumerator.
[[nodiscard]] constexpr std::string_view name(ReduceOp op) noexcept {
  constexpr std::array<std::string_view, reduce_op_count> names = {"sum", "prod", "min", "max", "avg"};
  return is_known(op) ? names[static_cast<std::uint8_t>(op)] : std::string_view{"unknown"};
}

/// Parses a name produced by `name(ReduceOp)`.
[[nodiscard]] constexpr std::optional<ReduceOp> parse_reduce_op(std::string_view s) noexcept {
  for (ReduceOp op : all_reduce_ops) {
    if (name(op) == s) return op;
  }
  return std::nullopt;
}

/// The validity matrix: Min/Max are undefined on complex numbers, Avg is only
/// defined on floating and complex types; bool takes Sum/Max as logical or and
/// Prod/Min as logical and.
[[nodiscard]] constexpr bool is_valid(DType d, ReduceOp op) noexcept {
  if (!is_known(d) || !is_known(op)) return false;
  const DTypeCategory c = category(d);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Prod:
      return true;
    case ReduceOp::Min:
    case ReduceOp::Max:
      return c != DTypeCategory::complex;
    case ReduceOp::Avg:
      return c == DTypeCategory::floating || c == DTypeCategory::complex;
  }
  return false;
}

/// Compile-time form of is_valid.
template <DType D, ReduceOp Op>
inline constexpr bool is_valid_v = is_valid(D, Op);

/// Calls `f(op_tag<Op>{})` for the run-time `op`, or `on_unknown()`.
template <class F, class U>
constexpr decltype(auto) visit_op(ReduceOp op, F&& f, U&& on_unknown) {
  switch (op) {
    case ReduceOp::Sum:
      return std::forward<F>(f)(op_tag<ReduceOp::Sum>{});
    case ReduceOp::Prod:
      return std::forward<F>(f)(op_tag<ReduceOp::Prod>{});
    case ReduceOp::Min:
      return std::forward<F>(f)(op_tag<ReduceOp::Min>{});
    case ReduceOp::Max:
      return std::forward<F>(f)(op_tag<ReduceOp::Max>{});
    case ReduceOp::Avg:
      return std::forward<F>(f)(op_tag<ReduceOp::Avg>{});
  }
  return std::forward<U>(on_unknown)();
}

}  // namespace polycoll
