#pragma once
/// @file numeric.hpp
/// Storage types for the 16- and 8-bit floating formats: f16 (IEEE binary16),
/// bf16 (bfloat16), f8e4m3 (OCP E4M3FN) and f8e5m2 (OCP E5M2).
/// Conversions from float round to nearest even and are bit-exact with CUDA's
/// host conversion functions (__float2half_rn, __float2bfloat16_rn,
/// __nv_cvt_float_to_fp8 with __NV_SATFINITE for E4M3 / __NV_NOSAT for E5M2).
/// Conversions to float are exact and bit-exact with CUDA's host
/// __half2float, __bfloat162float and __nv_cvt_fp8_to_halfraw + __half2float.
///
/// NaN handling (a documented decision: we copy what CUDA's host functions
/// do, bit for bit; the NaN bits of CUDA's device instructions were not
/// compared):
///  - f16:    float NaN -> 0x7FFF (canonical, sign and payload dropped).
///            f16 NaN -> float 0x7FFFFFFF (canonical, sign and payload dropped).
///  - bf16:   float NaN -> 0x7FFF (canonical, sign and payload dropped).
///            bf16 NaN -> float: bits << 16 (sign and payload preserved).
///  - f8e4m3: float NaN -> 0x7F (S.1111.111 with S = 0; sign and payload dropped).
///            +-inf and every |x| > 464 saturate to +-448 (0x7E / 0xFE).
///            f8e4m3 NaN (0x7F, 0xFF) -> float 0x7FFFFFFF.
///  - f8e5m2: float NaN -> 0x7F (sign and payload dropped); overflow -> +-inf.
///            f8e5m2 NaN -> float 0x7FFFFFFF (sign and payload dropped).
/// The conversions are integer-only (no dependence on the FP environment:
/// rounding mode, FTZ/DAZ) except the subnormal path of the to-float
/// conversions, which multiplies a small exact integer by a power of two whose
/// result is a normal float (exact under any rounding mode and FTZ/DAZ).
/// They are written as straight-line code with selects so that loops over
/// arrays auto-vectorize.

#include <bit>
#include <cstdint>
#include <cstring>

namespace polycoll {

/// IEEE 754 binary16.
struct f16 {
  /// Raw IEEE binary16 bit pattern.
  std::uint16_t bits = 0;
  /// Positive zero.
  constexpr f16() noexcept = default;
  /// Converts from float, rounding to nearest even (overflow -> +-inf, NaN -> 0x7FFF).
  constexpr explicit f16(float v) noexcept;
  /// Converts to float exactly (NaN -> 0x7FFFFFFF).
  constexpr explicit operator float() const noexcept;
  /// Builds a value from its raw bit pattern.
  static constexpr f16 from_bits(std::uint16_t b) noexcept { f16 r; r.bits = b; return r; }
  /// Bitwise equality (so +0 != -0 and NaN == NaN with the same bits).
  friend constexpr bool operator==(f16, f16) noexcept = default;
};

/// bfloat16: the top half of a binary32.
struct bf16 {
  /// Raw bfloat16 bit pattern (the upper 16 bits of a binary32).
  std::uint16_t bits = 0;
  /// Positive zero.
  constexpr bf16() noexcept = default;
  /// Converts from float, rounding to nearest even (NaN -> 0x7FFF).
  constexpr explicit bf16(float v) noexcept;
  /// Converts to float exactly (bits << 16, NaN payload preserved).
  constexpr explicit operator float() const noexcept;
  /// Builds a value from its raw bit pattern.
  static constexpr bf16 from_bits(std::uint16_t b) noexcept { bf16 r; r.bits = b; return r; }
  /// Bitwise equality (so +0 != -0 and NaN == NaN with the same bits).
  friend constexpr bool operator==(bf16, bf16) noexcept = default;
};

/// OCP 8-bit E4M3FN: no infinities, max finite 448, conversion saturates.
struct f8e4m3 {
  /// Raw E4M3FN bit pattern (S.EEEE.MMM, bias 7; S.1111.111 is NaN).
  std::uint8_t bits = 0;
  /// Positive zero.
  constexpr f8e4m3() noexcept = default;
  /// Converts from float, rounding to nearest even and saturating to +-448
  /// (+-inf -> +-448, NaN -> 0x7F).
  constexpr explicit f8e4m3(float v) noexcept;
  /// Converts to float exactly (NaN -> 0x7FFFFFFF).
  constexpr explicit operator float() const noexcept;
  /// Builds a value from its raw bit pattern.
  static constexpr f8e4m3 from_bits(std::uint8_t b) noexcept { f8e4m3 r; r.bits = b; return r; }
  /// Bitwise equality (so +0 != -0 and NaN == NaN with the same bits).
  friend constexpr bool operator==(f8e4m3, f8e4m3) noexcept = default;
};

/// OCP 8-bit E5M2: IEEE-like, with infinities.
struct f8e5m2 {
  /// Raw E5M2 bit pattern (S.EEEEE.MM, bias 15; the top byte of a binary16).
  std::uint8_t bits = 0;
  /// Positive zero.
  constexpr f8e5m2() noexcept = default;
  /// Converts from float, rounding to nearest even (overflow -> +-inf, NaN -> 0x7F).
  constexpr explicit f8e5m2(float v) noexcept;
  /// Converts to float exactly (NaN -> 0x7FFFFFFF).
  constexpr explicit operator float() const noexcept;
  /// Builds a value from its raw bit pattern.
  static constexpr f8e5m2 from_bits(std::uint8_t b) noexcept { f8e5m2 r; r.bits = b; return r; }
  /// Bitwise equality (so +0 != -0 and NaN == NaN with the same bits).
  friend constexpr bool operator==(f8e5m2, f8e5m2) noexcept = default;
};

namespace detail {

/// Canonical float NaN produced by CUDA's host half -> float conversion.
inline constexpr std::uint32_t canonical_f32_nan = 0x7FFFFFFFu;

/// Branch-free select, `c ? a : b`, written with masks: GCC otherwise turns
/// chains of ternaries into branches, and a floating-point operation sunk into
/// one of them blocks if-conversion (and so vectorization) under the default
/// -ftrapping-math.
constexpr std::uint32_t fp_select(bool c, std::uint32_t a, std::uint32_t b) noexcept {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
  return (a & m) | (b & ~m);
}

/// Rounds the magnitude bits `u` (sign cleared, not NaN, not above the
/// target's overflow threshold) of a float to a narrower binary format with
/// `M` mantissa bits and exponent bias `B`, round to nearest even. Returns the
/// target's magnitude bits (exponent and mantissa fields). Values at or past
/// the overflow threshold give out-of-range results the caller replaces.
template <unsigned M, unsigned B>
constexpr std::uint32_t round_f32_magnitude(std::uint32_t u) noexcept {
  constexpr unsigned drop = 23u - M;                       // float mantissa bits dropped
  constexpr std::uint32_t rebias = (127u - B) << 23;       // float exponent -> target exponent
  constexpr std::uint32_t min_normal = (128u - B) << 23;   // float bits of the target's min normal
  // Normal target: add half an ulp minus one plus the lsb (ties to even), shift.
  const std::uint32_t normal =
      (u - rebias + ((1u << (drop - 1u)) - 1u) + ((u >> drop) & 1u)) >> drop;
  // Subnormal target (or zero): shift the full significand right by a
  // per-value amount; clamped to [1, 25] so every lane stays well defined
  // (25 already flushes any 24-bit significand to 0).
  const std::uint32_t mant = (u & 0x007FFFFFu) | 0x00800000u;
  const int e = static_cast<int>(u >> 23);
  int s = static_cast<int>(151u - B - M) - e;
  s = s < 1 ? 1 : s;
  s = s > 25 ? 25 : s;
  const unsigned us = static_cast<unsigned>(s);
  const std::uint32_t sub =
      (mant + ((1u << (us - 1u)) - 1u) + ((mant >> us) & 1u)) >> us;
  return fp_select(u < min_normal, sub, normal);
}

/// float bits -> f16 bits, bit-exact with CUDA's host __float2half_rn.
constexpr std::uint16_t f32_to_f16_bits(std::uint32_t x) noexcept {
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t u = x & 0x7FFFFFFFu;
  std::uint32_t r = round_f32_magnitude<10, 15>(u);
  r = fp_select(u >= 0x477FF000u, 0x7C00u, r);  // |x| >= 65520 (incl. inf) -> inf
  r |= sign;
  r = fp_select(u > 0x7F800000u, 0x7FFFu, r);  // NaN -> canonical, no sign
  return static_cast<std::uint16_t>(r);
}

/// f16 bits -> float bits, bit-exact with CUDA's host __half2float.
constexpr std::uint32_t f16_to_f32_bits(std::uint16_t h) noexcept {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t em = h & 0x7FFFu;
  const std::uint32_t normal = (em << 13) + ((127u - 15u) << 23);
  // em * 2^-24: exact, and a normal float, so independent of FTZ/DAZ.
  const std::uint32_t sub =
      std::bit_cast<std::uint32_t>(static_cast<float>(static_cast<std::int32_t>(em)) * 0x1p-24f);
  std::uint32_t r = fp_select(em < 0x0400u, sub, normal);
  r = fp_select(em >= 0x7C00u, 0x7F800000u, r);  // inf (NaN fixed below)
  r |= sign;
  r = fp_select(em > 0x7C00u, canonical_f32_nan, r);  // NaN -> canonical, no sign
  return r;
}

/// float bits -> bf16 bits, bit-exact with CUDA's host __float2bfloat16_rn.
constexpr std::uint16_t f32_to_bf16_bits(std::uint32_t x) noexcept {
  // Cannot wrap: the largest non-NaN input 0xFF800000 plus 0x8000 fits.
  const std::uint32_t r = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
  return static_cast<std::uint16_t>(fp_select((x & 0x7FFFFFFFu) > 0x7F800000u, 0x7FFFu, r));
}

/// bf16 bits -> float bits (exact; identical to CUDA's host __bfloat162float).
constexpr std::uint32_t bf16_to_f32_bits(std::uint16_t b) noexcept {
  return static_cast<std::uint32_t>(b) << 16;
}

/// float bits -> E4M3FN bits, bit-exact with CUDA's host
/// __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3).
constexpr std::uint8_t f32_to_e4m3_bits(std::uint32_t x) noexcept {
  const std::uint32_t sign = (x >> 24) & 0x80u;
  const std::uint32_t u = x & 0x7FFFFFFFu;
  std::uint32_t r = round_f32_magnitude<3, 7>(u);
  r = fp_select(u > 0x43E80000u, 0x7Eu, r);  // |x| > 464 (incl. inf) -> 448
  r |= sign;
  r = fp_select(u > 0x7F800000u, 0x7Fu, r);  // NaN -> 0x7F, no sign
  return static_cast<std::uint8_t>(r);
}

/// E4M3FN bits -> float bits, bit-exact with CUDA's host
/// __nv_cvt_fp8_to_halfraw(x, __NV_E4M3) followed by __half2float.
constexpr std::uint32_t e4m3_to_f32_bits(std::uint8_t b) noexcept {
  const std::uint32_t sign = (static_cast<std::uint32_t>(b) & 0x80u) << 24;
  const std::uint32_t em = b & 0x7Fu;
  const std::uint32_t normal = (em << 20) + ((127u - 7u) << 23);
  // em * 2^-9: exact, and a normal float, so independent of FTZ/DAZ.
  const std::uint32_t sub =
      std::bit_cast<std::uint32_t>(static_cast<float>(static_cast<std::int32_t>(em)) * 0x1p-9f);
  std::uint32_t r = fp_select(em < 0x08u, sub, normal) | sign;
  r = fp_select(em == 0x7Fu, canonical_f32_nan, r);  // NaN -> canonical, no sign
  return r;
}

/// float bits -> E5M2 bits, bit-exact with CUDA's host
/// __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2).
constexpr std::uint8_t f32_to_e5m2_bits(std::uint32_t x) noexcept {
  const std::uint32_t sign = (x >> 24) & 0x80u;
  const std::uint32_t u = x & 0x7FFFFFFFu;
  std::uint32_t r = round_f32_magnitude<2, 15>(u);
  r = fp_select(u >= 0x47700000u, 0x7Cu, r);  // |x| >= 61440 (incl. inf) -> inf
  r |= sign;
  r = fp_select(u > 0x7F800000u, 0x7Fu, r);  // NaN -> 0x7F, no sign
  return static_cast<std::uint8_t>(r);
}

/// E5M2 bits -> float bits, bit-exact with CUDA's host
/// __nv_cvt_fp8_to_halfraw(x, __NV_E5M2) followed by __half2float.
constexpr std::uint32_t e5m2_to_f32_bits(std::uint8_t b) noexcept {
  // E5M2 is the top byte of a binary16.
  return f16_to_f32_bits(static_cast<std::uint16_t>(static_cast<std::uint32_t>(b) << 8));
}

}  // namespace detail

constexpr f16::f16(float v) noexcept : bits(detail::f32_to_f16_bits(std::bit_cast<std::uint32_t>(v))) {}
constexpr f16::operator float() const noexcept { return std::bit_cast<float>(detail::f16_to_f32_bits(bits)); }
constexpr bf16::bf16(float v) noexcept : bits(detail::f32_to_bf16_bits(std::bit_cast<std::uint32_t>(v))) {}
constexpr bf16::operator float() const noexcept { return std::bit_cast<float>(detail::bf16_to_f32_bits(bits)); }
constexpr f8e4m3::f8e4m3(float v) noexcept : bits(detail::f32_to_e4m3_bits(std::bit_cast<std::uint32_t>(v))) {}
constexpr f8e4m3::operator float() const noexcept { return std::bit_cast<float>(detail::e4m3_to_f32_bits(bits)); }
constexpr f8e5m2::f8e5m2(float v) noexcept : bits(detail::f32_to_e5m2_bits(std::bit_cast<std::uint32_t>(v))) {}
constexpr f8e5m2::operator float() const noexcept { return std::bit_cast<float>(detail::e5m2_to_f32_bits(bits)); }

}  // namespace polycoll
