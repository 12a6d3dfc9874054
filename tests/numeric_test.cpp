// Bit-exactness of polycoll's f16 / bf16 / f8e4m3 / f8e5m2 conversions against
// CUDA's host conversion functions (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h).
// Only the inline host code of the CUDA headers is used: no GPU, no cudart.

#include <polycoll/numeric.hpp>

#include <catch2/catch.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

using polycoll::bf16;
using polycoll::f16;
using polycoll::f8e4m3;
using polycoll::f8e5m2;

namespace {

// ---------------------------------------------------------------- CUDA reference

std::uint16_t cuda_from_f32_f16(float f) { return static_cast<__half_raw>(__float2half_rn(f)).x; }
std::uint16_t cuda_from_f32_bf16(float f) { return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(f)).x; }
std::uint8_t cuda_from_f32_e4m3(float f) { return __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3); }
std::uint8_t cuda_from_f32_e5m2(float f) { return __nv_cvt_float_to_fp8(f, __NV_NOSAT, __NV_E5M2); }

float cuda_to_f32_f16(std::uint16_t b) {
  __half_raw r;
  r.x = b;
  return __half2float(__half(r));
}
float cuda_to_f32_bf16(std::uint16_t b) {
  __nv_bfloat16_raw r;
  r.x = b;
  return __bfloat162float(__nv_bfloat16(r));
}
float cuda_to_f32_e4m3(std::uint8_t b) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(b, __NV_E4M3))); }
float cuda_to_f32_e5m2(std::uint8_t b) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(b, __NV_E5M2))); }

// Per-type glue: storage width, CUDA reference, and a few properties of the format.
template <class T> struct ref;
template <> struct ref<f16> {
  using storage = std::uint16_t;
  static constexpr const char* name = "f16";
  static storage from_f32(float f) { return cuda_from_f32_f16(f); }
  static float to_f32(storage b) { return cuda_to_f32_f16(b); }
  static bool is_nan(storage b) { return (b & 0x7FFFu) > 0x7C00u; }
  static bool is_finite(storage b) { return (b & 0x7FFFu) < 0x7C00u; }
};
template <> struct ref<bf16> {
  using storage = std::uint16_t;
  static constexpr const char* name = "bf16";
  static storage from_f32(float f) { return cuda_from_f32_bf16(f); }
  static float to_f32(storage b) { return cuda_to_f32_bf16(b); }
  static bool is_nan(storage b) { return (b & 0x7FFFu) > 0x7F80u; }
  static bool is_finite(storage b) { return (b & 0x7FFFu) < 0x7F80u; }
};
template <> struct ref<f8e4m3> {
  using storage = std::uint8_t;
  static constexpr const char* name = "f8e4m3";
  static storage from_f32(float f) { return cuda_from_f32_e4m3(f); }
  static float to_f32(storage b) { return cuda_to_f32_e4m3(b); }
  static bool is_nan(storage b) { return (b & 0x7Fu) == 0x7Fu; }
  static bool is_finite(storage b) { return !is_nan(b); }
};
template <> struct ref<f8e5m2> {
  using storage = std::uint8_t;
  static constexpr const char* name = "f8e5m2";
  static storage from_f32(float f) { return cuda_from_f32_e5m2(f); }
  static float to_f32(storage b) { return cuda_to_f32_e5m2(b); }
  static bool is_nan(storage b) { return (b & 0x7Fu) > 0x7Cu; }
  static bool is_finite(storage b) { return (b & 0x7Fu) < 0x7Cu; }
};

std::uint32_t f2u(float f) { return std::bit_cast<std::uint32_t>(f); }
float u2f(std::uint32_t u) { return std::bit_cast<float>(u); }

// Collects mismatches: how many, and the first few in hex.
struct mismatches {
  std::size_t count = 0;
  std::string first;
  void add(const char* fmt, unsigned long a, unsigned long b, unsigned long c) {
    if (count++ < 8) {
      char buf[128];
      std::snprintf(buf, sizeof buf, fmt, a, b, c);
      first += buf;
      first += '\n';
    }
  }
};

// ---------------------------------------------------------------- float inputs

void push_around(std::vector<std::uint32_t>& v, std::uint32_t u, int radius) {
  for (int d = -radius; d <= radius; ++d) v.push_back(u + static_cast<std::uint32_t>(d));
}

// Midpoints between adjacent representable values of T (the exact ties: both
// "round down to even" and "round up to even" cases occur, since the lower
// neighbour's last bit alternates), the values themselves, and their float
// neighbours; also the tie above the largest finite value (the overflow
// threshold) and the tie between 0 and the smallest subnormal.
template <class T>
void push_ties(std::vector<std::uint32_t>& v) {
  using R = ref<T>;
  using S = typename R::storage;
  constexpr unsigned n = 1u << (8 * sizeof(S));
  std::vector<double> vals;
  for (unsigned b = 0; b < n / 2; ++b) {  // positive patterns only
    if (R::is_finite(static_cast<S>(b))) vals.push_back(static_cast<double>(R::to_f32(static_cast<S>(b))));
  }
  std::sort(vals.begin(), vals.end());
  vals.erase(std::unique(vals.begin(), vals.end()), vals.end());
  // One more "virtual" value above the max: max + ulp(max).
  const double top = vals.back(), below_top = vals[vals.size() - 2];
  vals.push_back(top + (top - below_top));
  std::size_t inexact = 0;
  for (std::size_t i = 0; i + 1 < vals.size(); ++i) {
    const float mid = static_cast<float>((vals[i] + vals[i + 1]) / 2);
    inexact += static_cast<double>(mid) != (vals[i] + vals[i + 1]) / 2;  // ties must be exact floats
    for (std::uint32_t s : {0u, 0x80000000u}) {
      push_around(v, f2u(mid) | s, 2);
      if (vals[i] != 0) push_around(v, f2u(static_cast<float>(vals[i])) | s, 1);
    }
  }
  INFO(R::name << ": " << inexact << " midpoints are not floats");
  REQUIRE(inexact == 0);
}

const std::vector<std::uint32_t>& float_inputs() {
  static const std::vector<std::uint32_t> inputs = [] {
    std::vector<std::uint32_t> v;
    v.reserve(4'000'000);
    // Specials: zeros, infinities, NaNs (quiet, signalling, negative, payloads).
    for (std::uint32_t s : {0u, 0x80000000u}) {
      for (std::uint32_t u : {0x00000000u, 0x7F800000u, 0x7FC00000u, 0x7F800001u, 0x7FBFFFFFu, 0x7FFFFFFFu,
                              0x7FC00001u, 0x7FC01234u, 0x7FA00000u, 0x7F812345u, 0x7FE00000u, 0x7F900000u,
                              0x00000001u, 0x00000002u, 0x007FFFFFu, 0x00400000u, 0x00800000u, 0x3F800000u,
                              0x7F7FFFFFu})
        v.push_back(s | u);
    }
    // Every NaN with a "round" payload in the low and high mantissa bits.
    for (std::uint32_t k = 0; k < 23; ++k) {
      v.push_back(0x7F800000u | (1u << k));
      v.push_back(0xFF800000u | (1u << k));
      v.push_back(0x7F800000u | ((1u << (k + 1)) - 1u));
    }
    std::mt19937 rng(0x5EED1234u);  // std::mt19937's output sequence is fixed by the standard
    // Uniformly random bit patterns (mostly huge / tiny magnitudes, ~0.4% NaN).
    for (int i = 0; i < 1'000'000; ++i) v.push_back(static_cast<std::uint32_t>(rng()));
    // Random floats with exponents in [2^-40, 2^20): every format's subnormal,
    // normal and overflow ranges, with random mantissas and signs.
    for (int i = 0; i < 600'000; ++i) {
      const std::uint32_t r = static_cast<std::uint32_t>(rng());
      const std::uint32_t e = 127u - 40u + (static_cast<std::uint32_t>(rng()) % 60u);
      v.push_back((r & 0x807FFFFFu) | (e << 23));
    }
    // Random float subnormals.
    for (int i = 0; i < 20'000; ++i) v.push_back(static_cast<std::uint32_t>(rng()) & 0x807FFFFFu);
    // Random floats at the top of the float range (bf16 overflow: >= 0x7F7F8000 -> inf).
    for (int i = 0; i < 20'000; ++i) v.push_back((static_cast<std::uint32_t>(rng()) & 0x8000FFFFu) | 0x7F7F0000u);
    // Dense sweeps (every float) around thresholds of each format.
    const float thresholds[] = {
        65504.0f, 65520.0f, 65536.0f, 0x1p-14f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1.ffcp-15f,  // f16
        448.0f, 464.0f, 480.0f, 0x1p-6f, 0x1p-9f, 0x1p-10f, 0x1.8p-10f, 0x1.cp-7f,              // e4m3
        57344.0f, 61440.0f, 0x1p-16f, 0x1p-17f, 0x1.8p-17f, 0x1.8p-15f,                          // e5m2
        0x1p-126f, 0x1.fep127f, 0x1.ffp127f, 1.0f, 1.5f,                                           // bf16 & misc
    };
    for (float t : thresholds) {
      push_around(v, f2u(t), 4096);
      push_around(v, f2u(t) | 0x80000000u, 4096);
    }
    // Exact ties and their neighbours for every format.
    push_ties<f16>(v);
    push_ties<bf16>(v);
    push_ties<f8e4m3>(v);
    push_ties<f8e5m2>(v);
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  }();
  return inputs;
}

// ---------------------------------------------------------------- checks

// Every bit pattern of T, converted to float, matches CUDA bit for bit
// (CUDA's host NaN results are deterministic, so NaN bits are compared too).
template <class T>
void check_all_to_f32() {
  using R = ref<T>;
  using S = typename R::storage;
  constexpr unsigned n = 1u << (8 * sizeof(S));
  mismatches m;
  for (unsigned b = 0; b < n; ++b) {
    const std::uint32_t ours = f2u(static_cast<float>(T::from_bits(static_cast<S>(b))));
    const std::uint32_t cuda = f2u(R::to_f32(static_cast<S>(b)));
    if (ours != cuda) m.add("bits 0x%04lx: ours 0x%08lx, cuda 0x%08lx", b, ours, cuda);
  }
  INFO(R::name << " -> float: " << m.count << " mismatches; first:\n" << m.first);
  REQUIRE(m.count == 0);
}

template <class T>
void check_from_f32() {
  using R = ref<T>;
  const auto& in = float_inputs();
  REQUIRE(in.size() >= 1'000'000);
  mismatches m;
  for (std::uint32_t u : in) {
    const float f = u2f(u);
    const unsigned long ours = T(f).bits;
    const unsigned long cuda = R::from_f32(f);
    if (ours != cuda) m.add("float 0x%08lx: ours 0x%02lx, cuda 0x%02lx", u, ours, cuda);
  }
  INFO("float -> " << R::name << " over " << in.size() << " inputs: " << m.count << " mismatches; first:\n"
                   << m.first);
  REQUIRE(m.count == 0);
}

// T(float(x)) == x for every non-NaN bit pattern x (including infinities).
template <class T>
void check_round_trip() {
  using R = ref<T>;
  using S = typename R::storage;
  constexpr unsigned n = 1u << (8 * sizeof(S));
  mismatches m;
  for (unsigned b = 0; b < n; ++b) {
    if (R::is_nan(static_cast<S>(b))) continue;
    const T x = T::from_bits(static_cast<S>(b));
    const T y = T(static_cast<float>(x));
    if (!(x == y)) m.add("bits 0x%04lx -> float 0x%08lx -> 0x%04lx", b, f2u(static_cast<float>(x)), y.bits);
  }
  INFO(R::name << " round trip: " << m.count << " mismatches; first:\n" << m.first);
  REQUIRE(m.count == 0);
}

constexpr float inf = std::numeric_limits<float>::infinity();
const float qnan = std::numeric_limits<float>::quiet_NaN();

}  // namespace

// ---------------------------------------------------------------- test cases

TEST_CASE("numeric types are 16/8-bit trivially copyable storage", "[numeric]") {
  STATIC_REQUIRE(sizeof(f16) == 2);
  STATIC_REQUIRE(sizeof(bf16) == 2);
  STATIC_REQUIRE(sizeof(f8e4m3) == 1);
  STATIC_REQUIRE(sizeof(f8e5m2) == 1);
  STATIC_REQUIRE(std::is_trivially_copyable_v<f16>);
  STATIC_REQUIRE(std::is_trivially_copyable_v<bf16>);
  STATIC_REQUIRE(std::is_trivially_copyable_v<f8e4m3>);
  STATIC_REQUIRE(std::is_trivially_copyable_v<f8e5m2>);
  STATIC_REQUIRE(!std::is_convertible_v<float, f16>);  // conversions are explicit
  STATIC_REQUIRE(!std::is_convertible_v<f16, float>);
  STATIC_REQUIRE(f16().bits == 0);
  STATIC_REQUIRE(+f8e4m3().bits == 0);
}

TEST_CASE("conversions are constexpr", "[numeric]") {
  STATIC_REQUIRE(f16(1.0f).bits == 0x3C00);
  STATIC_REQUIRE(static_cast<float>(f16::from_bits(0x0001)) == 0x1p-24f);
  STATIC_REQUIRE(bf16(1.0f).bits == 0x3F80);
  STATIC_REQUIRE(static_cast<float>(bf16::from_bits(0xC040)) == -3.0f);
  STATIC_REQUIRE(+f8e4m3(448.0f).bits == 0x7E);
  STATIC_REQUIRE(static_cast<float>(f8e4m3::from_bits(0x01)) == 0x1p-9f);
  STATIC_REQUIRE(+f8e5m2(57344.0f).bits == 0x7B);
  STATIC_REQUIRE(static_cast<float>(f8e5m2::from_bits(0x01)) == 0x1p-16f);
}

TEST_CASE("known values", "[numeric]") {
  // f16
  CHECK(f16(1.0f).bits == 0x3C00);
  CHECK(f16(-2.0f).bits == 0xC000);
  CHECK(f16(0.0f).bits == 0x0000);
  CHECK(f16(-0.0f).bits == 0x8000);
  CHECK(f16(65504.0f).bits == 0x7BFF);
  CHECK(f16(65519.996f).bits == 0x7BFF);
  CHECK(f16(65520.0f).bits == 0x7C00);  // tie above max -> even -> inf
  CHECK(f16(-1e10f).bits == 0xFC00);
  CHECK(f16(inf).bits == 0x7C00);
  CHECK(f16(0x1p-14f).bits == 0x0400);   // min normal
  CHECK(f16(0x1p-24f).bits == 0x0001);   // min subnormal
  CHECK(f16(0x1p-25f).bits == 0x0000);   // tie -> even (0)
  CHECK(f16(0x1.8p-24f).bits == 0x0002); // tie -> even (2)
  CHECK(f16(1.0f + 0x1p-11f).bits == 0x3C00);         // tie -> even (down)
  CHECK(f16(1.0f + 3 * 0x1p-11f).bits == 0x3C02);     // tie -> even (up)
  CHECK(static_cast<float>(f16::from_bits(0x7BFF)) == 65504.0f);
  CHECK(static_cast<float>(f16::from_bits(0x3555)) == 0x1.554p-2f);
  // bf16
  CHECK(bf16(1.0f).bits == 0x3F80);
  CHECK(bf16(-1.0f).bits == 0xBF80);
  CHECK(bf16(1.0f + 0x1p-8f).bits == 0x3F80);         // tie -> even (down)
  CHECK(bf16(1.0f + 3 * 0x1p-8f).bits == 0x3F82);     // tie -> even (up)
  CHECK(bf16(std::numeric_limits<float>::max()).bits == 0x7F80);  // rounds to inf
  CHECK(bf16(0x1.fep127f).bits == 0x7F7F);            // bf16 max
  CHECK(bf16(-inf).bits == 0xFF80);
  CHECK(bf16(0x1p-149f).bits == 0x0000);
  CHECK(static_cast<float>(bf16::from_bits(0x7F7F)) == 0x1.fep127f);
  // f8e4m3 (saturating, no inf)
  CHECK(+f8e4m3(1.0f).bits == 0x38);
  CHECK(+f8e4m3(448.0f).bits == 0x7E);
  CHECK(+f8e4m3(-448.0f).bits == 0xFE);
  CHECK(+f8e4m3(464.0f).bits == 0x7E);
  CHECK(+f8e4m3(480.0f).bits == 0x7E);
  CHECK(+f8e4m3(1e9f).bits == 0x7E);
  CHECK(+f8e4m3(inf).bits == 0x7E);
  CHECK(+f8e4m3(-inf).bits == 0xFE);
  CHECK(+f8e4m3(0x1p-6f).bits == 0x08);   // min normal
  CHECK(+f8e4m3(0x1p-9f).bits == 0x01);   // min subnormal
  CHECK(+f8e4m3(0x1p-10f).bits == 0x00);  // tie -> even (0)
  CHECK(+f8e4m3(-0x1p-11f).bits == 0x80);
  CHECK(static_cast<float>(f8e4m3::from_bits(0x7E)) == 448.0f);
  CHECK(static_cast<float>(f8e4m3::from_bits(0xFE)) == -448.0f);
  CHECK(static_cast<float>(f8e4m3::from_bits(0x07)) == 7 * 0x1p-9f);
  // f8e5m2 (IEEE-like, overflow -> inf)
  CHECK(+f8e5m2(1.0f).bits == 0x3C);
  CHECK(+f8e5m2(57344.0f).bits == 0x7B);
  CHECK(+f8e5m2(61439.996f).bits == 0x7B);
  CHECK(+f8e5m2(61440.0f).bits == 0x7C);  // tie above max -> even -> inf
  CHECK(+f8e5m2(inf).bits == 0x7C);
  CHECK(+f8e5m2(-inf).bits == 0xFC);
  CHECK(+f8e5m2(0x1p-16f).bits == 0x01);
  CHECK(+f8e5m2(0x1p-17f).bits == 0x00);
  CHECK(static_cast<float>(f8e5m2::from_bits(0x7B)) == 57344.0f);
  CHECK(static_cast<float>(f8e5m2::from_bits(0xFC)) == -inf);
}

// The documented NaN policy, and a guard that CUDA still does the same: if a
// future CUDA release changes its host NaN handling this fails first.
TEST_CASE("NaN policy matches CUDA's host conversions", "[numeric][nan]") {
  const float nans[] = {qnan, -qnan, u2f(0x7F800001u), u2f(0xFF800001u), u2f(0x7FC01234u), u2f(0xFFFFFFFFu)};
  for (float n : nans) {
    INFO("input 0x" << std::hex << f2u(n));
    CHECK(f16(n).bits == 0x7FFF);
    CHECK(cuda_from_f32_f16(n) == 0x7FFF);
    CHECK(bf16(n).bits == 0x7FFF);
    CHECK(cuda_from_f32_bf16(n) == 0x7FFF);
    CHECK(+f8e4m3(n).bits == 0x7F);
    CHECK(+cuda_from_f32_e4m3(n) == 0x7F);
    CHECK(+f8e5m2(n).bits == 0x7F);
    CHECK(+cuda_from_f32_e5m2(n) == 0x7F);
  }
  // To float: f16 / fp8 NaNs become the canonical 0x7FFFFFFF, bf16 keeps its bits.
  CHECK(f2u(static_cast<float>(f16::from_bits(0xFE01))) == 0x7FFFFFFFu);
  CHECK(f2u(cuda_to_f32_f16(0xFE01)) == 0x7FFFFFFFu);
  CHECK(f2u(static_cast<float>(bf16::from_bits(0xFFC1))) == 0xFFC10000u);
  CHECK(f2u(cuda_to_f32_bf16(0xFFC1)) == 0xFFC10000u);
  CHECK(f2u(static_cast<float>(f8e4m3::from_bits(0xFF))) == 0x7FFFFFFFu);
  CHECK(f2u(cuda_to_f32_e4m3(0xFF)) == 0x7FFFFFFFu);
  CHECK(f2u(static_cast<float>(f8e5m2::from_bits(0xFD))) == 0x7FFFFFFFu);
  CHECK(f2u(cuda_to_f32_e5m2(0xFD)) == 0x7FFFFFFFu);
}

TEST_CASE("f16 -> float matches CUDA for every bit pattern", "[numeric][f16]") { check_all_to_f32<f16>(); }
TEST_CASE("bf16 -> float matches CUDA for every bit pattern", "[numeric][bf16]") { check_all_to_f32<bf16>(); }
TEST_CASE("f8e4m3 -> float matches CUDA for every bit pattern", "[numeric][f8e4m3]") { check_all_to_f32<f8e4m3>(); }
TEST_CASE("f8e5m2 -> float matches CUDA for every bit pattern", "[numeric][f8e5m2]") { check_all_to_f32<f8e5m2>(); }

TEST_CASE("float -> f16 matches __float2half_rn", "[numeric][f16]") { check_from_f32<f16>(); }
TEST_CASE("float -> bf16 matches __float2bfloat16_rn", "[numeric][bf16]") { check_from_f32<bf16>(); }
TEST_CASE("float -> f8e4m3 matches __nv_cvt_float_to_fp8 SATFINITE E4M3", "[numeric][f8e4m3]") {
  check_from_f32<f8e4m3>();
}
TEST_CASE("float -> f8e5m2 matches __nv_cvt_float_to_fp8 NOSAT E5M2", "[numeric][f8e5m2]") {
  check_from_f32<f8e5m2>();
}

TEST_CASE("f16 round-trips through float", "[numeric][f16][roundtrip]") { check_round_trip<f16>(); }
TEST_CASE("bf16 round-trips through float", "[numeric][bf16][roundtrip]") { check_round_trip<bf16>(); }
TEST_CASE("f8e4m3 round-trips through float", "[numeric][f8e4m3][roundtrip]") { check_round_trip<f8e4m3>(); }
TEST_CASE("f8e5m2 round-trips through float", "[numeric][f8e5m2][roundtrip]") { check_round_trip<f8e5m2>(); }
