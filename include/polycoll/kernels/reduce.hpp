#pragma once
/// @file kernels/reduce.hpp
/// Host reduction units: one element-wise kernel per valid (DType, ReduceOp)
/// pair, chosen at compile time by `dtype_tag<D>` and `op_tag<Op>`. Backends
/// that reduce on the host (Threads, the user MPI_Ops of Mpi, NoOp) call these;
/// an invalid pair (min/max on complex, avg on integers or bool) is a compile
/// error naming the function, never a run-time branch.
///
/// Semantics, per category of the dtype:
/// - integers: Sum and Prod wrap modulo 2^bits (computed in an unsigned type,
///   so there is no signed-overflow UB); Min and Max are the ordinary order.
/// - bool: Sum and Max are logical or, Prod and Min are logical and.
/// - f64, f32: IEEE arithmetic. Min and Max PROPAGATE NaN: if either operand is
///   NaN the result is NaN, like IEEE 754-2019 minimum/maximum (C23 fminimum)
///   and torch.minimum, unlike std::fmin, which drops the NaN: a reduction that
///   silently hides a NaN produced on one rank is the worse surprise. As there,
///   -0.0 < +0.0: min(+0, -0) is -0 and max is +0 in either operand order, so
///   no backend's choice of order changes a min/max result. Which NaN payload
///   survives is unspecified.
///   (-ffinite-math-only, part of -ffast-math, lets the compiler drop the NaN
///   tests; the guarantee holds for standard floating-point flags only.)
/// - f16, bf16, f8e4m3, f8e5m2: each operand is converted to float, the op is
///   applied in float, and the result is rounded back to the storage type once
///   per binary step (as CUDA's __hadd etc. do). Min/Max as for f32.
/// - c64, c128: Sum, Prod and Avg. Prod is the plain formula
///   (ar*br - ai*bi, ar*bi + ai*br), not the C Annex G / __mulsc3 path that
///   std::complex's operator* takes under GCC: the plain formula vectorises and
///   has no call per element, and the two differ only when the plain result is
///   NaN in both parts (an infinite or NaN operand, or overflow); for example
///   (inf+inf i)*(1+0i) is (NaN, NaN) here and (inf, inf) under Annex G.
/// - Avg is Sum during the fold, followed by one division by the divisor
///   (the world size) in the working precision: float for the narrow formats.
///
/// Results are reproducible: combine_n folds its sources left to right with the
/// same rounding per step as combine, so it is bit-identical to k-1 successive
/// combine calls (and a divide for Avg). As with any C++ code, building with
/// -ffp-contract=fast on FMA hardware lets the compiler fuse complex products.

#include <bit>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include <polycoll/dtype.hpp>
#include <polycoll/numeric.hpp>
#include <polycoll/reduce_op.hpp>

// Tells the vectoriser that the iterations of the next loop are independent.
// Every loop below writes out[i] only after reading element i of each input,
// so the one aliasing the contract allows (the output IS an input, exactly)
// carries no dependence between iterations. Without the hint GCC must guard
// each vector loop with a run-time overlap test, and at -O2 (GCC 12's
// "very cheap" cost model, which refuses such versioning) it does not
// vectorise at all. Local to this file.
// Clang gets nothing: its equivalent (`clang loop vectorize(assume_safety)`)
// also demands vectorisation and warns (-Wpass-failed) wherever that fails, as
// it must for the narrow formats; clang's own alias checks cost little.
#if defined(__clang__)
#define POLYCOLL_DETAIL_IVDEP
#elif defined(__GNUC__)
#define POLYCOLL_DETAIL_IVDEP _Pragma("GCC ivdep")
#else
#define POLYCOLL_DETAIL_IVDEP
#endif

namespace polycoll::kernels {

namespace detail {

/// Bytes of the output block that combine_n keeps in L1 while it folds more
/// sources than one loop fuses (2048 f32): small enough to stay resident next
/// to the streaming inputs (L1d is 32-48 KiB on current x86 and Arm cores),
/// large enough that the per-block loop overhead vanishes; 8 KiB was the
/// fastest of 4, 8 and 16 KiB (docs/benchmarks.md, "Fewer kernel variants").
inline constexpr std::size_t fold_block_bytes = 8192;

/// Sources one combine_n loop reads at once. Four inputs plus the output are
/// well within what hardware prefetchers track; more would spill registers on
/// the narrow formats, whose conversions are long.
inline constexpr std::size_t max_fused_sources = 4;

/// Bytes per fixed-length inner loop (see chunked): two AVX-512 vectors, four
/// AVX2 ones, eight SSE ones.
inline constexpr std::size_t chunk_bytes = 128;

template <ReduceOp Op>
inline constexpr bool is_sum_like_v = Op == ReduceOp::Sum || Op == ReduceOp::Avg;

// A unit is the element-wise policy of one (category, op): the lane type the
// loops run over, how many lanes make one element, the binary step `apply`,
// and for Avg-capable categories the final `finish` division.

/// Units without an Avg (integers, bool): the divisor is carried but unused.
struct no_divide {
  using divisor_type = std::size_t;
  static constexpr divisor_type make_divisor(std::size_t d) noexcept { return d; }
};

/// Min/max of floating operands from the selections made in both operand
/// orders (`r1`: b taken when it is smaller/larger, `r2`: a taken when it is),
/// as raw bits. Where the operands differ and neither is NaN, r1 == r2. For
/// +0 and -0, min ORs the sign bits (-0) and max ANDs them (+0). When one is
/// NaN, r1 and r2 are the two operands, and the OR of the bits below the sign
/// keeps the all-ones exponent and a non-zero mantissa: a NaN.
template <ReduceOp Op, class Bits>
constexpr Bits merge_selections(Bits r1, Bits r2) noexcept {
  if constexpr (Op == ReduceOp::Min) {
    return static_cast<Bits>(r1 | r2);
  } else {
    // The OR with its sign bit taken from the AND instead. Written as an XOR
    // with the masked difference: GCC 12 vectorises this form to fewer
    // instructions than the and/or/or form (docs/benchmarks.md, "Order-free
    // min and max").
    constexpr Bits sign = static_cast<Bits>(Bits{1} << (8 * sizeof(Bits) - 1));
    const Bits any = static_cast<Bits>(r1 | r2);
    return static_cast<Bits>(any ^ ((any ^ (r1 & r2)) & sign));
  }
}

/// f64 and f32: plain IEEE arithmetic.
template <class T, ReduceOp Op>
struct ieee_unit {
  using lane = T;
  using divisor_type = T;
  static constexpr std::size_t lanes_per_element = 1;

  static lane apply(lane a, lane b) noexcept {
    if constexpr (is_sum_like_v<Op>) {
      return a + b;
    } else if constexpr (Op == ReduceOp::Prod) {
      return a * b;
    } else {
      // The selection in both operand orders, merged bit by bit: where the
      // operands differ (and neither is NaN) the two agree; equal operands
      // differ only as +0 and -0, where -0 < +0 (IEEE 754-2019 minimum and
      // maximum) whatever the order, which a backend's algorithm chooses; and
      // a NaN operand makes the merge a NaN (the payload is unspecified).
      using bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
      const bits r1 = std::bit_cast<bits>(Op == ReduceOp::Min ? (b < a ? b : a) : (a < b ? b : a));
      const bits r2 = std::bit_cast<bits>(Op == ReduceOp::Min ? (a < b ? a : b) : (b < a ? a : b));
      return std::bit_cast<T>(merge_selections<Op>(r1, r2));
    }
  }
  static divisor_type make_divisor(std::size_t d) noexcept { return static_cast<T>(d); }
  static lane finish(lane v, divisor_type d) noexcept { return v / d; }
};

/// f16, bf16, f8e4m3, f8e5m2: op in float, one rounding back per step.
template <class T, ReduceOp Op>
struct narrow_float_unit {
  using lane = T;
  using divisor_type = float;
  static constexpr std::size_t lanes_per_element = 1;
  static_assert(std::is_trivially_copyable_v<T> && (sizeof(T) == 1 || sizeof(T) == 2),
                "polycoll::kernels: a narrow float is a 1- or 2-byte trivially copyable storage type");
  using raw = std::conditional_t<sizeof(T) == 1, std::uint8_t, std::uint16_t>;

  static lane apply(lane a, lane b) noexcept {
    const float x = static_cast<float>(a);
    const float y = static_cast<float>(b);
    if constexpr (is_sum_like_v<Op>) {
      return T(x + y);
    } else if constexpr (Op == ReduceOp::Prod) {
      return T(x * y);
    } else {
      // The result is one of the operands, which is exactly representable, so
      // rounding it back would be the identity: select the operand instead and
      // save the float -> T conversion. The select moves raw bytes, because
      // GCC vectorises an integer blend but not a choice between two structs.
      // Both operand orders merged as in ieee_unit: -0 < +0 whatever the
      // order, and a NaN operand gives a NaN (its bits: exponent and mantissa
      // all ones in f8e4m3, as in the IEEE-like formats, survive the merge).
      const raw ra = std::bit_cast<raw>(a), rb = std::bit_cast<raw>(b);
      const raw r1 = (Op == ReduceOp::Min ? y < x : x < y) ? rb : ra;
      const raw r2 = (Op == ReduceOp::Min ? x < y : y < x) ? ra : rb;
      return std::bit_cast<T>(merge_selections<Op>(r1, r2));
    }
  }
  static divisor_type make_divisor(std::size_t d) noexcept { return static_cast<float>(d); }
  static lane finish(lane v, divisor_type d) noexcept { return T(static_cast<float>(v) / d); }
};

/// Signed and unsigned integers: Sum/Prod modulo 2^bits, ordinary Min/Max.
template <class T, ReduceOp Op>
struct integer_unit : no_divide {
  using lane = T;
  static constexpr std::size_t lanes_per_element = 1;
  // Unsigned arithmetic wraps by definition. Types narrower than unsigned int
  // would be promoted to (signed) int, where 0xFFFF * 0xFFFF overflows, so
  // they compute in unsigned int; the conversion back to T is modular (C++20).
  using wide = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

  static lane apply(lane a, lane b) noexcept {
    if constexpr (Op == ReduceOp::Sum) {
      return static_cast<T>(static_cast<wide>(a) + static_cast<wide>(b));
    } else if constexpr (Op == ReduceOp::Prod) {
      return static_cast<T>(static_cast<wide>(a) * static_cast<wide>(b));
    } else if constexpr (Op == ReduceOp::Min) {
      return b < a ? b : a;
    } else {
      return a < b ? b : a;
    }
  }
};

/// bool: Sum/Max = or, Prod/Min = and. Bitwise on the 0/1 values, not the
/// short-circuit operators, so there is no branch per element.
template <ReduceOp Op>
struct bool_unit : no_divide {
  using lane = bool;
  static constexpr std::size_t lanes_per_element = 1;

  static lane apply(lane a, lane b) noexcept {
    if constexpr (Op == ReduceOp::Sum || Op == ReduceOp::Max) {
      return static_cast<bool>(a | b);
    } else {
      return static_cast<bool>(a & b);
    }
  }
};

/// c64, c128 Sum and Avg: component-wise, so the loops run over the 2n real
/// lanes ([complex.numbers] guarantees an array of std::complex<R> may be
/// accessed as an array of 2n R) and vectorise exactly like f32/f64.
template <class R, ReduceOp Op>
struct complex_unit : ieee_unit<R, Op> {
  static constexpr std::size_t lanes_per_element = 2;
};

/// c64, c128 Prod: the plain formula (see the file comment for why).
template <class R>
struct complex_unit<R, ReduceOp::Prod> : no_divide {
  using lane = std::complex<R>;
  static constexpr std::size_t lanes_per_element = 1;

  static lane apply(lane a, lane b) noexcept {
    const R ar = a.real(), ai = a.imag(), br = b.real(), bi = b.imag();
    return lane(ar * br - ai * bi, ar * bi + ai * br);
  }
};

/// The one dispatch: category (from the tag) x op -> unit. Primary left
/// undefined; every DTypeCategory has a specialisation below.
template <DTypeCategory C, class T, ReduceOp Op>
struct select_unit;

template <class T, ReduceOp Op>
struct select_unit<DTypeCategory::floating, T, Op> {
  using type = std::conditional_t<std::is_floating_point_v<T>, ieee_unit<T, Op>, narrow_float_unit<T, Op>>;
};
template <class T, ReduceOp Op>
struct select_unit<DTypeCategory::signed_integer, T, Op> {
  using type = integer_unit<T, Op>;
};
template <class T, ReduceOp Op>
struct select_unit<DTypeCategory::unsigned_integer, T, Op> {
  using type = integer_unit<T, Op>;
};
template <class T, ReduceOp Op>
struct select_unit<DTypeCategory::boolean, T, Op> {
  using type = bool_unit<Op>;
};
template <class T, ReduceOp Op>
struct select_unit<DTypeCategory::complex, T, Op> {
  using type = complex_unit<typename T::value_type, Op>;
};

/// The unit of a (DType, ReduceOp) pair.
template <DType D, ReduceOp Op>
using unit_t = typename select_unit<dtype_tag<D>::category, typename dtype_tag<D>::type, Op>::type;

/// Views an element array as the unit's lanes (the identity unless complex Sum/Avg).
template <class U, class T>
auto* as_lanes(T* p) noexcept {
  if constexpr (std::is_const_v<T>) {
    return reinterpret_cast<const typename U::lane*>(p);
  } else {
    return reinterpret_cast<typename U::lane*>(p);
  }
}

/// Source j of a fold as the unit's lanes, from an array of typed
/// (`const T*`) or untyped (`const void*`) pointers.
template <class U, class Src>
const typename U::lane* source(const Src* srcs, std::size_t j) noexcept {
  return as_lanes<U>(srcs[j]);
}

/// Calls body(i) for i < m, in chunks of a fixed number of lanes. GCC 12 at -O2
/// vectorises only loops whose trip count is a known multiple of the vector
/// length (its "very cheap" cost model: no scalar epilogue, no alias versioning),
/// so the hot loop gets a constant trip count and the remainder its own loop.
template <class Lane, class Body>
void chunked(std::size_t m, Body body) noexcept {
  constexpr std::size_t w = chunk_bytes / sizeof(Lane) > 0 ? chunk_bytes / sizeof(Lane) : 1;
  const std::size_t full = m - m % w;
  for (std::size_t i = 0; i < full; i += w) {
    // j counts from 0 to the constant w, not from i to i + w: `i + w` could
    // wrap, so GCC could not prove the trip count and would not vectorise at -O2.
    POLYCOLL_DETAIL_IVDEP
    for (std::size_t j = 0; j < w; ++j) body(i + j);
  }
  // The tail has fewer than w iterations, and says so: a plain `i < m` tail
  // leaves GCC unable to bound it (and, at -O3 with a constant m, to warn).
  for (std::size_t j = 0; j < m % w; ++j) body(full + j);
}

template <class U>
void binary_loop(typename U::lane* dst, const typename U::lane* a, const typename U::lane* b,
                 std::size_t m) noexcept {
  chunked<typename U::lane>(m, [=](std::size_t i) { dst[i] = U::apply(a[i], b[i]); });
}

template <class U>
void finish_loop(typename U::lane* x, std::size_t m, typename U::divisor_type d) noexcept {
  chunked<typename U::lane>(m, [=](std::size_t i) { x[i] = U::finish(x[i], d); });
}

/// One fused loop over `len` lanes: out[i] = ((start OP s[0][i]) OP s[1][i]) ...,
/// where start is out[i] itself (FromOut: a later pass of a block) or s[0][i]
/// (the first pass), then the Avg division when Finish. Each input is read once
/// and out written once per pass.
template <class U, bool FromOut, bool Finish, class Src, std::size_t... J>
void fold_pass(typename U::lane* out, const Src* src, std::size_t off, std::size_t len,
               [[maybe_unused]] typename U::divisor_type d, std::index_sequence<J...>) noexcept {
  using lane = typename U::lane;
  // Local copies: a store through `out` (a char type for u8/i8) could otherwise
  // alias the caller's pointer array and force a reload of every pointer per element.
  const lane* const p[] = {(source<U>(src, J) + off)...};
  chunked<lane>(len, [=](std::size_t i) {
    lane v = FromOut ? out[i] : p[0][i];
    ((FromOut || J > 0 ? void(v = U::apply(v, p[J][i])) : void()), ...);
    if constexpr (Finish) v = U::finish(v, d);
    out[i] = v;
  });
}

/// fold_pass with the run-time source count m (1 <= m <= max_fused_sources)
/// turned into a compile-time one, so each loop is fully unrolled over sources.
template <class U, bool FromOut, bool Finish, class Src>
void run_pass(std::size_t m, typename U::lane* out, const Src* src, std::size_t off, std::size_t len,
              typename U::divisor_type d) noexcept {
  static_assert(max_fused_sources == 4, "run_pass lists one case per fused source count");
  switch (m) {
    case 1:
      fold_pass<U, FromOut, Finish>(out, src, off, len, d, std::make_index_sequence<1>{});
      break;
    case 2:
      fold_pass<U, FromOut, Finish>(out, src, off, len, d, std::make_index_sequence<2>{});
      break;
    case 3:
      fold_pass<U, FromOut, Finish>(out, src, off, len, d, std::make_index_sequence<3>{});
      break;
    default:
      fold_pass<U, FromOut, Finish>(out, src, off, len, d, std::make_index_sequence<4>{});
      break;
  }
}

/// The fold of combine_n over the source array `srcs` of element type `Src`:
/// the untyped combine_n passes `const void*` (every caller of a pair goes
/// through it, so the pair's loops are instantiated once).
template <class U, bool Avg, class T, class Src>
void fold_n(T* dst, const Src* srcs, std::size_t k, std::size_t n, std::size_t divisor) noexcept {
  using lane = typename U::lane;
  constexpr std::size_t fuse = max_fused_sources;
  if (k == 0 || n == 0) return;
  const void* const target = dst;
  // Folding one source in place changes nothing.
  if (!Avg && k == 1 && static_cast<const void*>(srcs[0]) == target) return;
  lane* const out = as_lanes<U>(dst);
  const std::size_t m = n * U::lanes_per_element;
  const auto d = U::make_divisor(divisor);
  if (k <= fuse) {
    // The common case (up to 4 ranks per node): one streaming loop, no blocking needed.
    run_pass<U, false, Avg>(k, out, srcs, 0, m, d);
    return;
  }
  // More sources than one loop fuses: fold them into one block of dst at a
  // time, which stays in L1 between passes, so memory still sees every source
  // read once and dst written once. Every pass but one fuses exactly 4
  // sources, so it names that one fold_pass; the one other pass takes the
  // remaining r = 1..4 sources through run_pass. For pairs other than Avg that
  // pass is the block's first, which then uses the very loops of the k <= 4
  // case: k > 4 adds one loop per pair. For Avg pairs it is the last (with the
  // division): the first would need loops of its own either way, and the
  // short pass first measured slower for bf16 avg (docs/benchmarks.md, "Fewer
  // kernel variants", also for why one binary loop per source is not used).
  // When dst is a source that a pass after the first reads, the block's first
  // pass would overwrite it first: then the block is folded in an L1 buffer
  // and copied to dst at the end.
  constexpr std::size_t block = fold_block_bytes / sizeof(lane);
  constexpr auto four = std::make_index_sequence<fuse>{};
  const std::size_t first = Avg ? fuse : (k - 1) % fuse + 1;
  bool late_alias = false;
  for (std::size_t j = first; j < k; ++j) late_alias = late_alias || static_cast<const void*>(srcs[j]) == target;
  // Raw storage (lanes are implicit-lifetime types): no initialisation cost
  // when it is not used.
  alignas(64) unsigned char staging[fold_block_bytes];
  lane* const staged = reinterpret_cast<lane*>(staging);
  for (std::size_t off = 0; off < m; off += block) {
    const std::size_t len = m - off < block ? m - off : block;
    lane* const to = late_alias ? staged : out + off;
    std::size_t j = first;
    if constexpr (Avg) {
      fold_pass<U, false, false>(to, srcs, off, len, d, four);
      for (; k - j > fuse; j += fuse) fold_pass<U, true, false>(to, srcs + j, off, len, d, four);
      run_pass<U, true, true>(k - j, to, srcs + j, off, len, d);
    } else {
      run_pass<U, false, false>(first, to, srcs, off, len, d);
      for (; j < k; j += fuse) fold_pass<U, true, false>(to, srcs + j, off, len, d, four);
    }
    if (late_alias) std::memcpy(out + off, staged, len * sizeof(lane));
  }
}

}  // namespace detail

namespace detail {

/// The pair whose loops compute (D, Op): pairs with the same bits share one
/// kernel, so that a TU that instantiates every pair (the run-time dispatch,
/// in header-only mode) compiles 56 kernels, not 72. `lanes` elements of the
/// shared pair make one of D's.
/// - signed integer Sum and Prod: modulo 2^bits, computed in the unsigned type
///   (integer_unit), so they are the unsigned pair's bits;
/// - bool: or and and on the values 0 and 1 are u8 max and min;
/// - c64 and c128 Sum and Avg: component-wise (complex_unit), so the real
///   pair's over twice the elements.
/// Every shared access is one C++ allows: a signed integer through its
/// unsigned type, bool through unsigned char, std::complex<R> as R[2].
struct KernelPair {
  DType dtype;
  ReduceOp op;
  std::size_t lanes;
};

template <DType D, ReduceOp Op>
constexpr KernelPair kernel_pair() noexcept {
  const bool sum_or_prod = Op == ReduceOp::Sum || Op == ReduceOp::Prod;
  if constexpr (D == DType::I8 || D == DType::I16 || D == DType::I32 || D == DType::I64) {
    if (sum_or_prod) {
      return {D == DType::I8 ? DType::U8 : D == DType::I16 ? DType::U16 : D == DType::I32 ? DType::U32 : DType::U64,
              Op, 1};
    }
  } else if constexpr (D == DType::Bool) {
    return {DType::U8, Op == ReduceOp::Sum || Op == ReduceOp::Max ? ReduceOp::Max : ReduceOp::Min, 1};
  } else if constexpr (D == DType::C64 || D == DType::C128) {
    if (Op == ReduceOp::Sum || Op == ReduceOp::Avg) return {D == DType::C64 ? DType::F32 : DType::F64, Op, 2};
  }
  return {D, Op, 1};
}

template <DType D, ReduceOp Op>
inline constexpr bool has_own_kernel = kernel_pair<D, Op>().dtype == D;

}  // namespace detail

static_assert(sizeof(bool) == 1, "polycoll::kernels: bool shares u8's kernels, so it must be one byte");

/// Element-wise binary reduction: `dst[i] = a[i] OP b[i]` for `i < n`.
///
/// For `Avg` this is the Sum step (the division happens once, at the end: see
/// combine_n's `divisor` and divide()). `dst` may be `a` or `b` exactly (in
/// place); it must not otherwise overlap either input. An invalid pair (see
/// polycoll::is_valid) is a compile error.
template <DType D, ReduceOp Op>
void combine(dtype_tag<D>, op_tag<Op>, typename dtype_tag<D>::type* dst, const typename dtype_tag<D>::type* a,
             const typename dtype_tag<D>::type* b, std::size_t n) noexcept {
  static_assert(is_valid_v<D, Op>,
                "polycoll::kernels::combine: this (dtype, op) pair has no reduction: min/max are undefined on "
                "complex dtypes (c64, c128), and avg needs a floating or complex dtype (use sum on integers "
                "and bool); see polycoll::is_valid");
  if constexpr (!is_valid_v<D, Op>) {
    return;
  } else if constexpr (!detail::has_own_kernel<D, Op>) {
    constexpr detail::KernelPair k = detail::kernel_pair<D, Op>();
    using S = typename dtype_tag<k.dtype>::type;
    combine(dtype_tag<k.dtype>{}, op_tag<k.op>{}, reinterpret_cast<S*>(dst), reinterpret_cast<const S*>(a),
            reinterpret_cast<const S*>(b), n * k.lanes);
  } else {
    using U = detail::unit_t<D, Op>;
    detail::binary_loop<U>(detail::as_lanes<U>(dst), detail::as_lanes<U>(a), detail::as_lanes<U>(b),
                           n * U::lanes_per_element);
  }
}

/// combine_n (below) over untyped pointers: `dst` and each `srcs[j]` point at
/// arrays of the pair's element type. The same fold, bits and rules; the form
/// the backends call, since they hold their sources as `const void*`, and the
/// one that holds the loops.
template <DType D, ReduceOp Op>
void combine_n(dtype_tag<D>, op_tag<Op>, void* dst, const void* const* srcs, std::size_t k, std::size_t n,
               std::size_t divisor = 1) noexcept {
  static_assert(is_valid_v<D, Op>,
                "polycoll::kernels::combine_n: this (dtype, op) pair has no reduction: min/max are undefined "
                "on complex dtypes (c64, c128), and avg needs a floating or complex dtype (use sum on "
                "integers and bool); see polycoll::is_valid");
  if constexpr (!is_valid_v<D, Op>) {
    return;
  } else if constexpr (!detail::has_own_kernel<D, Op>) {
    constexpr detail::KernelPair kp = detail::kernel_pair<D, Op>();
    combine_n(dtype_tag<kp.dtype>{}, op_tag<kp.op>{}, dst, srcs, k, n * kp.lanes, divisor);
  } else {
    detail::fold_n<detail::unit_t<D, Op>, Op == ReduceOp::Avg>(static_cast<typename dtype_tag<D>::type*>(dst), srcs,
                                                               k, n, divisor);
  }
}

/// `x[i] /= divisor` for `i < n`: the Avg finish step for backends that sum
/// first. Floating and complex dtypes only; the narrow formats divide in float
/// and round once. `divisor` must be >= 1.
template <DType D>
void divide(dtype_tag<D>, typename dtype_tag<D>::type* x, std::size_t n, std::size_t divisor) noexcept {
  static_assert(is_valid_v<D, ReduceOp::Avg>,
                "polycoll::kernels::divide: only floating and complex dtypes can be divided (the avg finish "
                "step); integers and bool have no avg");
  if constexpr (is_valid_v<D, ReduceOp::Avg>) {
    using U = detail::unit_t<D, ReduceOp::Avg>;
    detail::finish_loop<U>(detail::as_lanes<U>(x), n * U::lanes_per_element, U::make_divisor(divisor));
  }
}

/// Folds `k >= 1` sources element-wise into `dst`:
/// `dst[i] = ((srcs[0][i] OP srcs[1][i]) OP srcs[2][i]) ... OP srcs[k-1][i]`,
/// left to right with combine's rounding per step (bit-identical to k-1
/// combine calls), then, for `Avg` only, divided by `divisor` (>= 1) as
/// divide() does. The reduce-scatter hot path: each source is read once and
/// dst written once, with no temporary. `dst` may be exactly one of the
/// sources, at any position (an in-place fold in rank order has it at the
/// caller's rank), and must not otherwise overlap any source. `k == 0` leaves
/// dst untouched.
///
/// The loops are the untyped form's: this one passes it the sources as
/// `const void*`, up to 64 at once. More sources are folded a block of
/// elements at a time in an L1 buffer, 64 sources in the first pass and the
/// buffer plus 63 in each later one, the Avg division last, so the order and
/// every rounding step stay those of one fold, and dst, which may be any of
/// the sources, is written only after every source's block was read.
template <DType D, ReduceOp Op>
void combine_n(dtype_tag<D> d, op_tag<Op> o, typename dtype_tag<D>::type* dst,
               const typename dtype_tag<D>::type* const* srcs, std::size_t k, std::size_t n,
               std::size_t divisor = 1) noexcept {
  static_assert(is_valid_v<D, Op>,
                "polycoll::kernels::combine_n: this (dtype, op) pair has no reduction: min/max are undefined "
                "on complex dtypes (c64, c128), and avg needs a floating or complex dtype (use sum on "
                "integers and bool); see polycoll::is_valid");
  if constexpr (is_valid_v<D, Op>) {
    using T = typename dtype_tag<D>::type;
    constexpr std::size_t batch = 64;
    const void* p[batch];
    if (k <= batch) {
      for (std::size_t j = 0; j < k; ++j) p[j] = srcs[j];
      combine_n(d, o, static_cast<void*>(dst), p, k, n, divisor);
      return;
    }
    constexpr ReduceOp step = Op == ReduceOp::Avg ? ReduceOp::Sum : Op;
    constexpr std::size_t block = detail::fold_block_bytes / sizeof(T);
    static_assert(block > 0, "polycoll::kernels: an element is larger than the fold block");
    alignas(64) unsigned char staging[detail::fold_block_bytes];
    T* const acc = reinterpret_cast<T*>(staging);
    for (std::size_t off = 0; off < n; off += block) {
      const std::size_t len = n - off < block ? n - off : block;
      for (std::size_t q = 0; q < k;) {
        std::size_t m = 0;
        if (q != 0) p[m++] = acc;
        while (m < batch && q < k) p[m++] = srcs[q++] + off;
        combine_n(d, op_tag<step>{}, static_cast<void*>(acc), p, m, len);
      }
      if constexpr (Op == ReduceOp::Avg) divide(d, acc, len, divisor);
      std::memcpy(static_cast<void*>(dst + off), acc, len * sizeof(T));
    }
  }
}

}  // namespace polycoll::kernels

#undef POLYCOLL_DETAIL_IVDEP

/// @cond POLYCOLL_LIBRARY_INTERNALS
// ---------------------------------------------------------------- libpolycoll
// Every valid (dtype, op) pair (polycoll::is_valid), as X(D, Op) with the bare
// enumerator names: what libpolycoll instantiates once. A static_assert in
// src/kernels.cpp checks the list against is_valid.
#define POLYCOLL_DETAIL_PAIRS_ALL5(X, D) X(D, Sum) X(D, Prod) X(D, Min) X(D, Max) X(D, Avg)
#define POLYCOLL_DETAIL_PAIRS_ORDERED(X, D) X(D, Sum) X(D, Prod) X(D, Min) X(D, Max)
#define POLYCOLL_DETAIL_PAIRS_COMPLEX(X, D) X(D, Sum) X(D, Prod) X(D, Avg)
#define POLYCOLL_DETAIL_FOR_EACH_VALID_PAIR(X)                                                                    \
  POLYCOLL_DETAIL_PAIRS_ALL5(X, F64) POLYCOLL_DETAIL_PAIRS_ALL5(X, F32) POLYCOLL_DETAIL_PAIRS_ALL5(X, F16)         \
  POLYCOLL_DETAIL_PAIRS_ALL5(X, BF16) POLYCOLL_DETAIL_PAIRS_ALL5(X, F8E4M3) POLYCOLL_DETAIL_PAIRS_ALL5(X, F8E5M2) \
  POLYCOLL_DETAIL_PAIRS_ORDERED(X, I64) POLYCOLL_DETAIL_PAIRS_ORDERED(X, I32)                                     \
  POLYCOLL_DETAIL_PAIRS_ORDERED(X, I16) POLYCOLL_DETAIL_PAIRS_ORDERED(X, I8)                                      \
  POLYCOLL_DETAIL_PAIRS_ORDERED(X, U64) POLYCOLL_DETAIL_PAIRS_ORDERED(X, U32)                                     \
  POLYCOLL_DETAIL_PAIRS_ORDERED(X, U16) POLYCOLL_DETAIL_PAIRS_ORDERED(X, U8)                                      \
  POLYCOLL_DETAIL_PAIRS_ORDERED(X, Bool) POLYCOLL_DETAIL_PAIRS_COMPLEX(X, C64) POLYCOLL_DETAIL_PAIRS_COMPLEX(X, C128)
/// Every dtype, as X(D): what libpolycoll instantiates the backends' movement
/// calls for (a static_assert in src/kernels.cpp checks it against all_dtypes).
#define POLYCOLL_DETAIL_FOR_EACH_DTYPE(X)                                                                       \
  X(F64) X(F32) X(F16) X(BF16) X(F8E4M3) X(F8E5M2) X(I64) X(I32) X(I16) X(I8) X(U64) X(U32) X(U16) X(U8) X(Bool) \
  X(C64) X(C128)
/// Every dtype that divide() takes (the Avg dtypes), as X(D).
#define POLYCOLL_DETAIL_FOR_EACH_AVG_DTYPE(X) X(F64) X(F32) X(F16) X(BF16) X(F8E4M3) X(F8E5M2) X(C64) X(C128)

// `Prefix template` for one pair's kernels: `extern` declares, empty defines.
#define POLYCOLL_DETAIL_KERNEL_PAIR(Prefix, D, Op)                                                                \
  Prefix template void combine<DType::D, ReduceOp::Op>(                                                         \
      dtype_tag<DType::D>, op_tag<ReduceOp::Op>, dtype_tag<DType::D>::type*, const dtype_tag<DType::D>::type*, \
      const dtype_tag<DType::D>::type*, std::size_t) noexcept;                                                 \
  Prefix template void combine_n<DType::D, ReduceOp::Op>(dtype_tag<DType::D>, op_tag<ReduceOp::Op>, void*,     \
                                                         const void* const*, std::size_t, std::size_t,        \
                                                         std::size_t) noexcept;
#define POLYCOLL_DETAIL_KERNEL_DIVIDE(Prefix, D) \
  Prefix template void divide<DType::D>(dtype_tag<DType::D>, dtype_tag<DType::D>::type*, std::size_t, std::size_t) noexcept;

// The kernels live in libpolycoll unless POLYCOLL_HEADER_ONLY. Three of the
// library's sources (POLYCOLL_DETAIL_INLINE_KERNELS) instantiate them inline
// instead: src/kernels.cpp, which defines them; src/mpi.cpp, whose MPI user
// ops' AVX2 clones flatten the kernel into themselves (a clone can only
// inline a body it instantiates); and src/threads.cpp, whose Reduction
// entries then hold the loop itself rather than a call into the kernel (a
// call more per 8-byte all_reduce). NoOp reduces nothing.
#if !defined(POLYCOLL_HEADER_ONLY) && !defined(POLYCOLL_DETAIL_INLINE_KERNELS)
namespace polycoll::kernels {
#define POLYCOLL_DETAIL_X(D, Op) POLYCOLL_DETAIL_KERNEL_PAIR(extern, D, Op)
POLYCOLL_DETAIL_FOR_EACH_VALID_PAIR(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X
#define POLYCOLL_DETAIL_X(D) POLYCOLL_DETAIL_KERNEL_DIVIDE(extern, D)
POLYCOLL_DETAIL_FOR_EACH_AVG_DTYPE(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X
}  // namespace polycoll::kernels
#endif
/// @endcond
