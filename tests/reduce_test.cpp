// Tests of the host reduction units (kernels/reduce.hpp) and the validity
// matrix (reduce_op.hpp). Every valid (DType, ReduceOp) pair is checked against
// a scalar reference written here independently of the kernels, bit for bit
// (any NaN equals any NaN), at lengths that hit the empty case, the scalar tail
// of the vector loops, and the block boundary of combine_n.
#include <polycoll/kernels/reduce.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using namespace polycoll;
namespace kn = polycoll::kernels;

template <DType D>
using elem_t = typename dtype_tag<D>::type;

// ------------------------------------------------------------ compile-time iteration

template <DType D, ReduceOp Op, class F>
void visit_if_valid(F& f) {
  if constexpr (is_valid_v<D, Op>) f(dtype_tag<D>{}, op_tag<Op>{});
}

template <DType D, class F>
void for_each_op(F& f) {
  [&]<std::size_t... J>(std::index_sequence<J...>) {
    (visit_if_valid<D, all_reduce_ops[J]>(f), ...);
  }(std::make_index_sequence<reduce_op_count>{});
}

/// Calls f(dtype_tag<D>{}, op_tag<Op>{}) for every valid pair of all_dtypes x all_reduce_ops.
template <class F>
void for_each_valid_pair(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (for_each_op<all_dtypes[I]>(f), ...);
  }(std::make_index_sequence<dtype_count>{});
}

template <DType D>
constexpr bool is_native_float_v = std::is_floating_point_v<elem_t<D>>;
template <DType D>
constexpr bool is_narrow_float_v = dtype_tag<D>::category == DTypeCategory::floating && !is_native_float_v<D>;

// ------------------------------------------------------------ inputs

/// splitmix64: a fixed, portable sequence (std distributions differ between standard libraries).
struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double unit() { return static_cast<double>(next() >> 11) * 0x1p-53; }  // [0, 1)
  // Magnitude in [0.5, 2) with a random sign and a full mantissa. A product of
  // up to 9 of them stays below 2^9 and a sum below 18: finite in every narrow
  // format (f8e4m3 saturates at 448 instead of overflowing). Never zero, so the
  // unspecified order of -0.0 and +0.0 under min/max never matters.
  double real() {
    const double mag = std::ldexp(1.0 + unit(), (next() & 1) ? 0 : -1);
    return (next() & 1) ? -mag : mag;
  }
};

template <DType D>
elem_t<D> random_value(Rng& g) {
  using T = elem_t<D>;
  constexpr DTypeCategory c = dtype_tag<D>::category;
  if constexpr (is_native_float_v<D>) {
    return static_cast<T>(g.real());
  } else if constexpr (c == DTypeCategory::floating) {
    return T(static_cast<float>(g.real()));
  } else if constexpr (c == DTypeCategory::boolean) {
    return (g.next() & 1) != 0;
  } else if constexpr (c == DTypeCategory::complex) {
    using R = typename T::value_type;
    return T(static_cast<R>(g.real()), static_cast<R>(g.real()));
  } else {
    return static_cast<T>(g.next());  // full range: sums and products wrap
  }
}

/// A heap array of n elements plus one guard element after them (std::vector<bool> has no data()).
template <class T>
struct Buffer {
  std::size_t n;
  std::unique_ptr<T[]> p;
  explicit Buffer(std::size_t size) : n(size), p(new T[size + 1]()) {}
  T* data() { return p.get(); }
  const T* data() const { return p.get(); }
  T& operator[](std::size_t i) { return p[i]; }
  const T& operator[](std::size_t i) const { return p[i]; }
};

template <DType D>
Buffer<elem_t<D>> random_buffer(std::size_t n, Rng& g) {
  Buffer<elem_t<D>> b(n);
  for (std::size_t i = 0; i <= n; ++i) b[i] = random_value<D>(g);  // guard included
  return b;
}

template <class T>
Buffer<T> copy_of(const Buffer<T>& src) {
  Buffer<T> b(src.n);
  for (std::size_t i = 0; i <= src.n; ++i) b[i] = src[i];
  return b;
}

// ------------------------------------------------------------ the independent reference

template <class R>
R ref_ieee(ReduceOp op, R a, R b) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return a + b;
    case ReduceOp::Prod:
      return a * b;
    // IEEE 754-2019 minimum/maximum: NaN wins, and -0 < +0.
    case ReduceOp::Min:
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<R>::quiet_NaN();
      if (a == b) return std::signbit(a) ? a : b;
      return a < b ? a : b;
    case ReduceOp::Max:
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<R>::quiet_NaN();
      if (a == b) return std::signbit(a) ? b : a;
      return a < b ? b : a;
  }
  return R{};
}

/// One binary step of the reduction, scalar and straightforward.
template <DType D, ReduceOp Op>
elem_t<D> ref_step(elem_t<D> a, elem_t<D> b) {
  using T = elem_t<D>;
  constexpr DTypeCategory c = dtype_tag<D>::category;
  if constexpr (is_native_float_v<D>) {
    return ref_ieee<T>(Op, a, b);
  } else if constexpr (c == DTypeCategory::floating) {
    // Convert both to float, apply in float, round back once.
    return T(ref_ieee<float>(Op, static_cast<float>(a), static_cast<float>(b)));
  } else if constexpr (c == DTypeCategory::boolean) {
    return (Op == ReduceOp::Sum || Op == ReduceOp::Max) ? (a || b) : (a && b);
  } else if constexpr (c == DTypeCategory::complex) {
    if constexpr (Op == ReduceOp::Prod) {
      return T(a.real() * b.real() - a.imag() * b.imag(), a.real() * b.imag() + a.imag() * b.real());
    } else {
      return T(a.real() + b.real(), a.imag() + b.imag());
    }
  } else {
    // Integers: modular arithmetic through 64-bit unsigned, truncated back.
    const auto ua = static_cast<std::uint64_t>(a), ub = static_cast<std::uint64_t>(b);
    if constexpr (Op == ReduceOp::Sum) return static_cast<T>(ua + ub);
    if constexpr (Op == ReduceOp::Prod) return static_cast<T>(ua * ub);
    if constexpr (Op == ReduceOp::Min) return b < a ? b : a;
    if constexpr (Op == ReduceOp::Max) return a < b ? b : a;
  }
}

template <DType D>
elem_t<D> ref_divide(elem_t<D> v, std::size_t d) {
  using T = elem_t<D>;
  if constexpr (is_native_float_v<D>) {
    return v / static_cast<T>(d);
  } else if constexpr (is_narrow_float_v<D>) {
    return T(static_cast<float>(v) / static_cast<float>(d));
  } else {
    using R = typename T::value_type;
    return T(v.real() / static_cast<R>(d), v.imag() / static_cast<R>(d));
  }
}

// ------------------------------------------------------------ comparison

template <class R>
bool same_ieee(R x, R y) {
  if (std::isnan(x) && std::isnan(y)) return true;
  return std::memcmp(&x, &y, sizeof(R)) == 0;
}

/// Bitwise equality, any NaN equal to any NaN.
template <DType D>
bool same(elem_t<D> x, elem_t<D> y) {
  if constexpr (is_native_float_v<D>) {
    return same_ieee(x, y);
  } else if constexpr (is_narrow_float_v<D>) {
    return x.bits == y.bits || (std::isnan(static_cast<float>(x)) && std::isnan(static_cast<float>(y)));
  } else if constexpr (dtype_tag<D>::category == DTypeCategory::complex) {
    return same_ieee(x.real(), y.real()) && same_ieee(x.imag(), y.imag());
  } else {
    return x == y;
  }
}

template <DType D>
bool is_nan(elem_t<D> x) {
  if constexpr (is_native_float_v<D>) {
    return std::isnan(x);
  } else {
    return std::isnan(static_cast<float>(x));
  }
}

/// Number of i < n with got[i] != want[i], plus whether the guard element got[n] is intact.
template <DType D>
struct Diff {
  std::size_t mismatches = 0;
  std::size_t first = 0;
  bool guard_ok = true;
};

template <DType D>
Diff<D> compare(const Buffer<elem_t<D>>& got, const Buffer<elem_t<D>>& want, const elem_t<D>& guard) {
  Diff<D> r;
  for (std::size_t i = 0; i < got.n; ++i) {
    if (!same<D>(got[i], want[i])) {
      if (r.mismatches++ == 0) r.first = i;
    }
  }
  r.guard_ok = same<D>(got[got.n], guard);
  return r;
}

template <DType D, ReduceOp Op>
std::string label(std::size_t n, std::size_t k = 0) {
  std::ostringstream s;
  s << name(D) << ' ' << name(Op) << " n=" << n;
  if (k) s << " k=" << k;
  return s.str();
}

// Lengths: empty, one, odd and even short tails, a multiple-of-vector body,
// above a power of two, and past combine_n's block for the 1-byte types.
const std::vector<std::size_t> lengths = {0, 1, 7, 8, 1000, 4097, kn::detail::fold_block_bytes + 3};

constexpr std::size_t max_sources = 9;

// ------------------------------------------------------------ combine

TEST_CASE("combine matches the scalar reference for every valid (dtype, op)", "[reduce]") {
  std::size_t pairs = 0;
  for_each_valid_pair([&]<DType D, ReduceOp Op>(dtype_tag<D> dt, op_tag<Op> op) {
    ++pairs;
    Rng g{0x5EED0000u + static_cast<unsigned>(D) * 16 + static_cast<unsigned>(Op)};
    for (std::size_t n : lengths) {
      INFO((label<D, Op>(n)));
      const auto a = random_buffer<D>(n, g);
      const auto b = random_buffer<D>(n, g);
      Buffer<elem_t<D>> want(n);
      for (std::size_t i = 0; i < n; ++i) want[i] = ref_step<D, Op>(a[i], b[i]);

      auto out = random_buffer<D>(n, g);
      const auto guard = out[n];
      kn::combine(dt, op, out.data(), a.data(), b.data(), n);
      auto d = compare<D>(out, want, guard);
      CHECK(d.mismatches == 0);
      CHECK(d.first == 0);  // on failure, reports the first wrong index
      CHECK(d.guard_ok);    // nothing written past n

      auto in_a = copy_of(a);  // dst == a
      kn::combine(dt, op, in_a.data(), in_a.data(), b.data(), n);
      d = compare<D>(in_a, want, a[n]);
      CHECK(d.mismatches == 0);
      CHECK(d.guard_ok);

      auto in_b = copy_of(b);  // dst == b
      kn::combine(dt, op, in_b.data(), a.data(), in_b.data(), n);
      d = compare<D>(in_b, want, b[n]);
      CHECK(d.mismatches == 0);
      CHECK(d.guard_ok);
    }
  });
  // 17 x 5 minus min/max on 2 complex types and avg on 8 integer types and bool.
  CHECK(pairs == 72);
}

// ------------------------------------------------------------ combine_n

// The reference of combine_n: src[0] OP src[1] ... OP src[k-1], element by
// element, then / divisor for Avg.
template <DType D, ReduceOp Op>
Buffer<elem_t<D>> left_fold(const std::vector<Buffer<elem_t<D>>>& src, std::size_t k, std::size_t n,
                            std::size_t divisor) {
  Buffer<elem_t<D>> want(n);
  for (std::size_t i = 0; i < n; ++i) {
    elem_t<D> v = src[0][i];
    for (std::size_t j = 1; j < k; ++j) v = ref_step<D, Op>(v, src[j][i]);
    if constexpr (Op == ReduceOp::Avg) v = ref_divide<D>(v, divisor);
    want[i] = v;
  }
  return want;
}

// combine_n with dst == srcs[a] exactly, for each a in `at`: the bits of `want`.
template <DType D, ReduceOp Op>
void check_in_place_at(std::initializer_list<std::size_t> at, const std::vector<Buffer<elem_t<D>>>& src,
                       std::vector<const elem_t<D>*>& ptrs, std::size_t k, std::size_t n, std::size_t divisor,
                       const Buffer<elem_t<D>>& want) {
  for (std::size_t a : at) {
    INFO("dst == srcs[" << a << "]");
    auto in_place = copy_of(src[a]);
    ptrs[a] = in_place.data();
    kn::combine_n(dtype_tag<D>{}, op_tag<Op>{}, in_place.data(), ptrs.data(), k, n, divisor);
    ptrs[a] = src[a].data();
    const auto d = compare<D>(in_place, want, src[a][n]);
    CHECK(d.mismatches == 0);
    CHECK(d.guard_ok);
  }
}

TEST_CASE("combine_n matches a left fold of the reference for every valid (dtype, op)", "[reduce]") {
  for_each_valid_pair([&]<DType D, ReduceOp Op>(dtype_tag<D> dt, op_tag<Op> op) {
    Rng g{0xC0FFEE00u + static_cast<unsigned>(D) * 16 + static_cast<unsigned>(Op)};
    for (std::size_t n : lengths) {
      std::vector<Buffer<elem_t<D>>> src;
      for (std::size_t j = 0; j < max_sources; ++j) src.push_back(random_buffer<D>(n, g));
      // k = 1, 2, 3 and 8 as specified, plus 4 (one full fused loop) and 5-7
      // and 9: a blocked fold whose short pass has 1, 2 or 3 sources (its
      // first pass for most ops, its last for avg), with 9 passing twice more.
      for (std::size_t k : {1, 2, 3, 4, 5, 6, 7, 8, 9}) {
        INFO((label<D, Op>(n, k)));
        // Avg divides by the divisor; every other op must ignore it.
        const std::size_t divisor = Op == ReduceOp::Avg ? k : 7;
        const Buffer<elem_t<D>> want = left_fold<D, Op>(src, k, n, divisor);
        std::vector<const elem_t<D>*> ptrs;
        for (std::size_t j = 0; j < k; ++j) ptrs.push_back(src[j].data());

        auto out = random_buffer<D>(n, g);
        const auto guard = out[n];
        kn::combine_n(dt, op, out.data(), ptrs.data(), k, n, divisor);
        auto d = compare<D>(out, want, guard);
        CHECK(d.mismatches == 0);
        CHECK(d.first == 0);
        CHECK(d.guard_ok);

        // dst == srcs[a] exactly, at every position a (an in-place fold in
        // rank order has it at the caller's rank), including the positions a
        // pass after the blocked fold's first reads (a >= 1..4, by op and k).
        for (std::size_t a = 0; a < k; ++a) check_in_place_at<D, Op>({a}, src, ptrs, k, n, divisor, want);
      }

      // The contract in one line: bit-identical to k-1 successive combine calls (and a divide for Avg).
      INFO((label<D, Op>(n, 8)) << " vs successive combine");
      auto chained = copy_of(src[0]);
      for (std::size_t j = 1; j < 8; ++j) kn::combine(dt, op, chained.data(), chained.data(), src[j].data(), n);
      if constexpr (Op == ReduceOp::Avg) kn::divide(dt, chained.data(), n, 8);
      std::vector<const elem_t<D>*> ptrs;
      for (std::size_t j = 0; j < 8; ++j) ptrs.push_back(src[j].data());
      auto out = copy_of(src[max_sources - 1]);
      kn::combine_n(dt, op, out.data(), ptrs.data(), 8, n, 8);
      CHECK(compare<D>(out, chained, chained[n]).mismatches == 0);
    }
  });
}

// The typed combine_n hands the untyped one up to 64 sources at once; more
// are folded a block at a time through a buffer. Same bits as a left fold,
// with dst any source, including one that only a later batch reads, and the
// block boundary crossed (8192 elements: past the 1-byte types' block).
TEST_CASE("combine_n over more than 64 sources matches a left fold for every valid (dtype, op)", "[reduce]") {
  constexpr std::size_t k = 70, n = 8200;
  for_each_valid_pair([&]<DType D, ReduceOp Op>(dtype_tag<D> dt, op_tag<Op> op) {
    Rng g{0xBA7C4000u + static_cast<unsigned>(D) * 16 + static_cast<unsigned>(Op)};
    std::vector<Buffer<elem_t<D>>> src;
    for (std::size_t j = 0; j < k; ++j) src.push_back(random_buffer<D>(n, g));
    const std::size_t divisor = Op == ReduceOp::Avg ? k : 7;
    const Buffer<elem_t<D>> want = left_fold<D, Op>(src, k, n, divisor);
    std::vector<const elem_t<D>*> ptrs;
    for (std::size_t j = 0; j < k; ++j) ptrs.push_back(src[j].data());
    INFO((label<D, Op>(n, k)));
    auto out = random_buffer<D>(n, g);
    kn::combine_n(dt, op, out.data(), ptrs.data(), k, n, divisor);
    auto d = compare<D>(out, want, out[n]);
    CHECK(d.mismatches == 0);
    CHECK(d.guard_ok);
    check_in_place_at<D, Op>({0, 63, 64, k - 1}, src, ptrs, k, n, divisor, want);
  });
}

TEST_CASE("combine_n with k == 0 or n == 0 writes nothing", "[reduce]") {
  float dst[3] = {1.0f, 2.0f, 3.0f};
  const float src[3] = {9.0f, 9.0f, 9.0f};
  const float* srcs[] = {src};
  kn::combine_n(dtype_tag<DType::F32>{}, polycoll::avg, dst, srcs, 0, 3, 2);
  kn::combine_n(dtype_tag<DType::F32>{}, polycoll::sum, dst, srcs, 1, 0);
  CHECK(dst[0] == 1.0f);
  CHECK(dst[1] == 2.0f);
  CHECK(dst[2] == 3.0f);
}

// ------------------------------------------------------------ divide

TEST_CASE("divide matches the reference for floating and complex dtypes", "[reduce]") {
  std::size_t types = 0;
  for_each_valid_pair([&]<DType D, ReduceOp Op>(dtype_tag<D> dt, op_tag<Op>) {
    if constexpr (Op == ReduceOp::Avg) {
      ++types;
      Rng g{0xD1D1D100u + static_cast<unsigned>(D)};
      for (std::size_t n : lengths) {
        for (std::size_t divisor : {1, 3, 8}) {
          INFO((label<D, Op>(n)) << " divisor=" << divisor);
          auto x = random_buffer<D>(n, g);
          Buffer<elem_t<D>> want(n);
          for (std::size_t i = 0; i < n; ++i) want[i] = ref_divide<D>(x[i], divisor);
          const auto guard = x[n];
          kn::divide(dt, x.data(), n, divisor);
          const auto d = compare<D>(x, want, guard);
          CHECK(d.mismatches == 0);
          CHECK(d.guard_ok);
        }
      }
    }
  });
  CHECK(types == 8);  // 6 floating + 2 complex
}

// ------------------------------------------------------------ exhaustive narrow formats

template <DType D>
bool is_zero(elem_t<D> x) {
  return static_cast<float>(x) == 0.0f;
}

TEST_CASE("8-bit floats: every pair of bit patterns, every op", "[reduce]") {
  // 65536 pairs per op cover zeros, subnormals, saturation (e4m3), infinities
  // (e5m2) and NaNs, which the random inputs above avoid on purpose.
  for_each_valid_pair([&]<DType D, ReduceOp Op>(dtype_tag<D> dt, op_tag<Op> op) {
    if constexpr (D == DType::F8E4M3 || D == DType::F8E5M2) {
      using T = elem_t<D>;
      constexpr std::size_t n = 256 * 256;
      Buffer<T> a(n), b(n), want(n), out(n);
      for (std::size_t i = 0; i < n; ++i) {
        a[i] = T::from_bits(static_cast<std::uint8_t>(i >> 8));
        b[i] = T::from_bits(static_cast<std::uint8_t>(i & 0xFF));
        want[i] = ref_step<D, Op>(a[i], b[i]);
      }
      kn::combine(dt, op, out.data(), a.data(), b.data(), n);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if (!same<D>(out[i], want[i])) ++bad;  // -0 < +0 in min/max too, in either order
      }
      INFO((label<D, Op>(n)));
      CHECK(bad == 0);
    }
  });
}

TEST_CASE("divide: every f16 and 8-bit float bit pattern", "[reduce]") {
  // Every bit pattern, including subnormals, infinities and NaNs, divided by
  // non-powers of two (which round), against divide-in-float-round-once.
  for_each_valid_pair([&]<DType D, ReduceOp Op>(dtype_tag<D> dt, op_tag<Op>) {
    if constexpr (Op == ReduceOp::Avg && (D == DType::F16 || D == DType::F8E4M3 || D == DType::F8E5M2)) {
      using T = elem_t<D>;
      using Bits = decltype(T{}.bits);
      constexpr std::size_t n = std::size_t{1} << (8 * sizeof(Bits));
      for (std::size_t divisor : {3, 5, 6, 7, 10, 12}) {
        Buffer<T> x(n), want(n);
        for (std::size_t i = 0; i < n; ++i) {
          x[i] = T::from_bits(static_cast<Bits>(i));
          want[i] = ref_divide<D>(x[i], divisor);
        }
        kn::divide(dt, x.data(), n, divisor);
        INFO((label<D, Op>(n)) << " divisor=" << divisor);
        CHECK(compare<D>(x, want, x[n]).mismatches == 0);
      }
    }
  });
}

// ------------------------------------------------------------ NaN and complex corner cases

TEST_CASE("floating min and max propagate NaN from either operand", "[reduce]") {
  for_each_valid_pair([&]<DType D, ReduceOp Op>(dtype_tag<D> dt, op_tag<Op> op) {
    if constexpr (dtype_tag<D>::category == DTypeCategory::floating &&
                  (Op == ReduceOp::Min || Op == ReduceOp::Max)) {
      using T = elem_t<D>;
      const T nan = T(std::numeric_limits<float>::quiet_NaN());
      // Every format here has a NaN; checked rather than assumed so that a
      // format without one would fail only the NaN expectations it cannot meet.
      const bool has_nan = is_nan<D>(nan);
      CHECK(has_nan);
      Rng g{0xBADF00Du + static_cast<unsigned>(D) * 16 + static_cast<unsigned>(Op)};
      const std::size_t n = 1000;
      INFO((label<D, Op>(n)));
      auto a = random_buffer<D>(n, g);
      auto b = random_buffer<D>(n, g);
      auto c = random_buffer<D>(n, g);
      for (std::size_t i = 0; i < n; i += 3) a[i] = nan;
      for (std::size_t i = 0; i < n; i += 5) b[i] = nan;
      for (std::size_t i = 1; i < n; i += 7) c[i] = nan;

      Buffer<T> want(n);
      for (std::size_t i = 0; i < n; ++i) want[i] = ref_step<D, Op>(a[i], b[i]);
      Buffer<T> out(n);
      kn::combine(dt, op, out.data(), a.data(), b.data(), n);
      CHECK(compare<D>(out, want, out[n]).mismatches == 0);
      std::size_t lost = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const bool expect_nan = has_nan && (i % 3 == 0 || i % 5 == 0);
        if (expect_nan && !is_nan<D>(out[i])) ++lost;
      }
      CHECK(lost == 0);

      // A NaN only in the last source of a fold still wins.
      const T* srcs[] = {a.data(), b.data(), c.data()};
      kn::combine_n(dt, op, out.data(), srcs, 3, n);
      lost = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const bool expect_nan = has_nan && (i % 3 == 0 || i % 5 == 0 || i % 7 == 1);
        if (expect_nan != is_nan<D>(out[i])) ++lost;
      }
      CHECK(lost == 0);
    }
  });
}

// -0 < +0 (IEEE 754-2019 minimum/maximum): min(+0, -0) is -0 and max is +0
// whichever operand comes first, in every floating format, in the vector loop
// and in its tail, and through a fold; so no backend's operand order shows.
TEST_CASE("floating min and max order -0 below +0 in either operand order", "[reduce]") {
  for_each_valid_pair([&]<DType D, ReduceOp Op>(dtype_tag<D> dt, op_tag<Op> op) {
    if constexpr (dtype_tag<D>::category == DTypeCategory::floating &&
                  (Op == ReduceOp::Min || Op == ReduceOp::Max)) {
      using T = elem_t<D>;
      const std::size_t n = 203;  // a vector body and a scalar tail
      INFO((label<D, Op>(n)));
      const T pz = T(0.0f), nz = T(-0.0f);
      const T want = Op == ReduceOp::Min ? nz : pz;
      Buffer<T> a(n), b(n), out(n);
      for (std::size_t i = 0; i < n; ++i) {
        a[i] = i % 2 == 0 ? pz : nz;
        b[i] = i % 2 == 0 ? nz : pz;
      }
      std::size_t bad = 0;
      kn::combine(dt, op, out.data(), a.data(), b.data(), n);
      for (std::size_t i = 0; i < n; ++i) bad += same<D>(out[i], want) ? 0 : 1;
      kn::combine(dt, op, out.data(), b.data(), a.data(), n);
      for (std::size_t i = 0; i < n; ++i) bad += same<D>(out[i], want) ? 0 : 1;
      const T* srcs[] = {a.data(), a.data(), b.data(), a.data(), a.data()};
      kn::combine_n(dt, op, out.data(), srcs, 5, n);
      for (std::size_t i = 0; i < n; ++i) bad += same<D>(out[i], want) ? 0 : 1;
      CHECK(bad == 0);
    }
  });
}

TEST_CASE("complex prod is the plain formula, not the Annex G recovery", "[reduce]") {
  // (inf + inf i) * (1 + 0i): the plain formula gives inf*1 - inf*0 = NaN and
  // inf*0 + inf*1 = NaN; Annex G (__mulsc3) would recover (inf, inf).
  const float inf = std::numeric_limits<float>::infinity();
  const std::complex<float> a[1] = {{inf, inf}};
  const std::complex<float> b[1] = {{1.0f, 0.0f}};
  std::complex<float> out[1];
  kn::combine(dtype_tag<DType::C64>{}, polycoll::prod, out, a, b, 1);
  CHECK(std::isnan(out[0].real()));
  CHECK(std::isnan(out[0].imag()));

  const std::complex<double> x[1] = {{1.5, -2.0}};
  const std::complex<double> y[1] = {{-0.5, 4.0}};
  std::complex<double> z[1];
  kn::combine(dtype_tag<DType::C128>{}, polycoll::prod, z, x, y, 1);
  CHECK(z[0].real() == 1.5 * -0.5 - -2.0 * 4.0);
  CHECK(z[0].imag() == 1.5 * 4.0 + -2.0 * -0.5);
}

TEST_CASE("integer sum and prod wrap and bool ops are logical", "[reduce]") {
  const std::int8_t a8[2] = {127, -128};
  const std::int8_t b8[2] = {1, -1};
  std::int8_t s8[2], p8[2];
  kn::combine(dtype_tag<DType::I8>{}, polycoll::sum, s8, a8, b8, 2);
  kn::combine(dtype_tag<DType::I8>{}, polycoll::prod, p8, a8, b8, 2);
  CHECK(s8[0] == -128);
  CHECK(s8[1] == 127);
  CHECK(p8[0] == 127);
  CHECK(p8[1] == -128);  // -128 * -1 = 128 wraps to -128

  const std::uint16_t a16[1] = {0xFFFF};
  std::uint16_t p16[1];
  kn::combine(dtype_tag<DType::U16>{}, polycoll::prod, p16, a16, a16, 1);  // would overflow int if promoted
  CHECK(p16[0] == 1);

  const bool x[4] = {false, false, true, true};
  const bool y[4] = {false, true, false, true};
  bool r[4];
  kn::combine(dtype_tag<DType::Bool>{}, polycoll::sum, r, x, y, 4);
  CHECK((!r[0] && r[1] && r[2] && r[3]));
  kn::combine(dtype_tag<DType::Bool>{}, polycoll::max, r, x, y, 4);
  CHECK((!r[0] && r[1] && r[2] && r[3]));
  kn::combine(dtype_tag<DType::Bool>{}, polycoll::prod, r, x, y, 4);
  CHECK((!r[0] && !r[1] && !r[2] && r[3]));
  kn::combine(dtype_tag<DType::Bool>{}, polycoll::min, r, x, y, 4);
  CHECK((!r[0] && !r[1] && !r[2] && r[3]));
}

// ------------------------------------------------------------ validity matrix

struct ValidityRow {
  DType dtype;
  std::array<bool, reduce_op_count> valid;  // Sum, Prod, Min, Max, Avg
};

// Written out by hand from DESIGN.md §2, not derived from the categories.
constexpr bool Y = true, N = false;
constexpr std::array<ValidityRow, dtype_count> validity_table = {{
    //                 Sum Prod Min Max Avg
    {DType::F64,      {Y,  Y,   Y,  Y,  Y}},
    {DType::F32,      {Y,  Y,   Y,  Y,  Y}},
    {DType::F16,      {Y,  Y,   Y,  Y,  Y}},
    {DType::BF16,     {Y,  Y,   Y,  Y,  Y}},
    {DType::F8E4M3,   {Y,  Y,   Y,  Y,  Y}},
    {DType::F8E5M2,   {Y,  Y,   Y,  Y,  Y}},
    {DType::I64,      {Y,  Y,   Y,  Y,  N}},
    {DType::I32,      {Y,  Y,   Y,  Y,  N}},
    {DType::I16,      {Y,  Y,   Y,  Y,  N}},
    {DType::I8,       {Y,  Y,   Y,  Y,  N}},
    {DType::U64,      {Y,  Y,   Y,  Y,  N}},
    {DType::U32,      {Y,  Y,   Y,  Y,  N}},
    {DType::U16,      {Y,  Y,   Y,  Y,  N}},
    {DType::U8,       {Y,  Y,   Y,  Y,  N}},
    {DType::Bool,     {Y,  Y,   Y,  Y,  N}},
    {DType::C64,      {Y,  Y,   N,  N,  Y}},
    {DType::C128,     {Y,  Y,   N,  N,  Y}},
}};

constexpr bool table_matches_is_valid() {
  for (const auto& row : validity_table) {
    for (std::size_t j = 0; j < reduce_op_count; ++j) {
      if (is_valid(row.dtype, all_reduce_ops[j]) != row.valid[j]) return false;
    }
  }
  return true;
}

TEST_CASE("is_valid matches the hand-written 17x5 table", "[reduce]") {
  for (std::size_t i = 0; i < dtype_count; ++i) {
    const ValidityRow& row = validity_table[i];
    REQUIRE(row.dtype == all_dtypes[i]);  // the table covers every dtype, in order
    for (std::size_t j = 0; j < reduce_op_count; ++j) {
      INFO(name(row.dtype) << ' ' << name(all_reduce_ops[j]));
      CHECK(is_valid(row.dtype, all_reduce_ops[j]) == row.valid[j]);
    }
  }
  STATIC_REQUIRE(table_matches_is_valid());
}

TEST_CASE("is_valid is false for values that are not enumerators", "[reduce]") {
  CHECK_FALSE(is_valid(static_cast<DType>(99), ReduceOp::Sum));
  CHECK_FALSE(is_valid(static_cast<DType>(6), ReduceOp::Sum));  // a gap between F8E5M2 and I64
  CHECK_FALSE(is_valid(static_cast<DType>(255), ReduceOp::Max));
  CHECK_FALSE(is_valid(DType::F32, static_cast<ReduceOp>(7)));
  CHECK_FALSE(is_valid(DType::I32, static_cast<ReduceOp>(5)));
  CHECK_FALSE(is_valid(static_cast<DType>(99), static_cast<ReduceOp>(7)));
  STATIC_REQUIRE_FALSE(is_valid(static_cast<DType>(99), ReduceOp::Sum));
}

// ------------------------------------------------------------ compile-time facts

constexpr std::size_t count_valid_pairs() {
  std::size_t c = 0;
  for (DType d : all_dtypes) {
    for (ReduceOp op : all_reduce_ops) c += is_valid(d, op) ? 1 : 0;
  }
  return c;
}

TEST_CASE("reduction units: compile-time facts", "[reduce]") {
  STATIC_REQUIRE(count_valid_pairs() == 72);
  STATIC_REQUIRE(is_valid_v<DType::C64, ReduceOp::Prod>);
  STATIC_REQUIRE_FALSE(is_valid_v<DType::C128, ReduceOp::Min>);
  STATIC_REQUIRE_FALSE(is_valid_v<DType::I32, ReduceOp::Avg>);
  STATIC_REQUIRE_FALSE(is_valid_v<DType::Bool, ReduceOp::Avg>);
  STATIC_REQUIRE(is_valid_v<DType::BF16, ReduceOp::Avg>);

  float* f = nullptr;
  const float* const* fs = nullptr;
  STATIC_REQUIRE(noexcept(kn::combine(dtype_tag<DType::F32>{}, polycoll::sum, f, f, f, 0)));
  STATIC_REQUIRE(noexcept(kn::combine_n(dtype_tag<DType::F32>{}, polycoll::avg, f, fs, 1, 0, 1)));
  STATIC_REQUIRE(noexcept(kn::divide(dtype_tag<DType::F32>{}, f, 0, 1)));
  STATIC_REQUIRE(std::is_void_v<decltype(kn::combine(dtype_tag<DType::F32>{}, polycoll::sum, f, f, f, 0))>);
  // The block that combine_n keeps in L1 holds a whole number of the widest lane.
  STATIC_REQUIRE(kn::detail::fold_block_bytes % sizeof(std::complex<double>) == 0);
}

}  // namespace
