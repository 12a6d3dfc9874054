#pragma once
/// @file dtype.hpp
/// Element types: the run-time DType, its compile-time tag, the C++ type map,
/// and visit_dtype, the one place where a run-time DType becomes a tag.

#include <array>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include <polycoll/numeric.hpp>

namespace polycoll {

/// Element type of a buffer. Discriminants are stable (numr's) and never reused.
enum class DType : std::uint8_t {
  F64 = 0, F32 = 1, F16 = 2, BF16 = 3, F8E4M3 = 4, F8E5M2 = 5,
  I64 = 10, I32 = 11, I16 = 12, I8 = 13,
  U64 = 20, U32 = 21, U16 = 22, U8 = 23,
  Bool = 30,
  C64 = 40, C128 = 41,
};

/// Number of DType enumerators; every dtype table checks itself against it.
inline constexpr std::size_t dtype_count = 17;

/// Every DType, in discriminant order.
inline constexpr std::array<DType, dtype_count> all_dtypes = {
    DType::F64, DType::F32, DType::F16,  DType::BF16, DType::F8E4M3, DType::F8E5M2,
    DType::I64, DType::I32, DType::I16,  DType::I8,   DType::U64,    DType::U32,
    DType::U16, DType::U8,  DType::Bool, DType::C64,  DType::C128};

/// What kind of number a DType holds; decides which reductions are legal.
enum class DTypeCategory : std::uint8_t { floating, signed_integer, unsigned_integer, boolean, complex };

namespace detail {
template <class T, DType D, DTypeCategory C, const char* N>
struct dtype_tag_base {
  using type = T;
  static constexpr DType value = D;
  static constexpr DTypeCategory category = C;
  static constexpr std::string_view name{N};
  static constexpr std::size_t size = sizeof(T);
};
inline constexpr char n_f64[] = "f64", n_f32[] = "f32", n_f16[] = "f16", n_bf16[] = "bf16",
                      n_f8e4m3[] = "f8e4m3", n_f8e5m2[] = "f8e5m2", n_i64[] = "i64", n_i32[] = "i32",
                      n_i16[] = "i16", n_i8[] = "i8", n_u64[] = "u64", n_u32[] = "u32", n_u16[] = "u16",
                      n_u8[] = "u8", n_bool[] = "bool", n_c64[] = "c64", n_c128[] = "c128";
}  // namespace detail

/// Compile-time tag of a DType: `dtype_tag<DType::F32>::type` is `float`.
template <DType D>
struct dtype_tag;

/// Internal: spells one dtype_tag specialisation (undefined again after the table).
#define POLYCOLL_DTYPE_TAG(D, T, C, N) \
  template <>                          \
  struct dtype_tag<DType::D> : detail::dtype_tag_base<T, DType::D, DTypeCategory::C, detail::N> {}

POLYCOLL_DTYPE_TAG(F64, double, floating, n_f64);
POLYCOLL_DTYPE_TAG(F32, float, floating, n_f32);
POLYCOLL_DTYPE_TAG(F16, f16, floating, n_f16);
POLYCOLL_DTYPE_TAG(BF16, bf16, floating, n_bf16);
POLYCOLL_DTYPE_TAG(F8E4M3, f8e4m3, floating, n_f8e4m3);
POLYCOLL_DTYPE_TAG(F8E5M2, f8e5m2, floating, n_f8e5m2);
POLYCOLL_DTYPE_TAG(I64, std::int64_t, signed_integer, n_i64);
POLYCOLL_DTYPE_TAG(I32, std::int32_t, signed_integer, n_i32);
POLYCOLL_DTYPE_TAG(I16, std::int16_t, signed_integer, n_i16);
POLYCOLL_DTYPE_TAG(I8, std::int8_t, signed_integer, n_i8);
POLYCOLL_DTYPE_TAG(U64, std::uint64_t, unsigned_integer, n_u64);
POLYCOLL_DTYPE_TAG(U32, std::uint32_t, unsigned_integer, n_u32);
POLYCOLL_DTYPE_TAG(U16, std::uint16_t, unsigned_integer, n_u16);
POLYCOLL_DTYPE_TAG(U8, std::uint8_t, unsigned_integer, n_u8);
POLYCOLL_DTYPE_TAG(Bool, bool, boolean, n_bool);
POLYCOLL_DTYPE_TAG(C64, std::complex<float>, complex, n_c64);
POLYCOLL_DTYPE_TAG(C128, std::complex<double>, complex, n_c128);
#undef POLYCOLL_DTYPE_TAG

/// True for the tag types dtype_tag<D>.
template <class T>
inline constexpr bool is_dtype_tag_v = false;
/// dtype_tag<D> is a tag.
template <DType D>
inline constexpr bool is_dtype_tag_v<dtype_tag<D>> = true;

namespace detail {
template <class T>
inline constexpr bool always_false_v = false;

// The standard integer types (and plain char) stand for the exact-width type
// of their size and signedness: `long long` is I64 like `long`, `char` is I8
// or U8 as the platform's char is signed or not. Character types other than
// char (wchar_t, char8_t, char16_t, char32_t) and bool are not integers here.
template <class T>
inline constexpr bool is_standard_integer_v =
    std::is_same_v<T, char> || std::is_same_v<T, signed char> || std::is_same_v<T, unsigned char> ||
    std::is_same_v<T, short> || std::is_same_v<T, unsigned short> || std::is_same_v<T, int> ||
    std::is_same_v<T, unsigned> || std::is_same_v<T, long> || std::is_same_v<T, unsigned long> ||
    std::is_same_v<T, long long> || std::is_same_v<T, unsigned long long>;

template <std::size_t Size, bool Signed>
struct exact_integer;
template <> struct exact_integer<1, true> { using type = std::int8_t; };
template <> struct exact_integer<2, true> { using type = std::int16_t; };
template <> struct exact_integer<4, true> { using type = std::int32_t; };
template <> struct exact_integer<8, true> { using type = std::int64_t; };
template <> struct exact_integer<1, false> { using type = std::uint8_t; };
template <> struct exact_integer<2, false> { using type = std::uint16_t; };
template <> struct exact_integer<4, false> { using type = std::uint32_t; };
template <> struct exact_integer<8, false> { using type = std::uint64_t; };

template <class T, bool = is_standard_integer_v<T>>
struct canonical_element {
  using type = T;
};
template <class T>
struct canonical_element<T, true> {
  using type = typename exact_integer<sizeof(T), std::is_signed_v<T>>::type;
};

/// The dtype's own C++ type that element type T (cv-unqualified) is read as:
/// T itself, or for a standard integer type the exact-width type of its size
/// and signedness (`long long` -> std::int64_t).
template <class T>
using canonical_element_t = typename canonical_element<T>::type;

template <class T, std::size_t I = 0>
constexpr std::optional<DType> find_dtype_of() {
  if constexpr (I == dtype_count) {
    return std::nullopt;
  } else if constexpr (std::is_same_v<typename dtype_tag<all_dtypes[I]>::type, canonical_element_t<T>>) {
    return all_dtypes[I];
  } else {
    return find_dtype_of<T, I + 1>();
  }
}
}  // namespace detail

/// Maps a C++ element type to its DType. An unsupported type is a readable
/// compile error, never a link error.
template <class T>
struct dtype_of {
  static_assert(!std::is_pointer_v<T>,
                "polycoll: pointers cannot be communicated: the address means nothing on another rank");
  static_assert(detail::find_dtype_of<T>().has_value(),
                "polycoll: unsupported element type; use double, float, f16, bf16, f8e4m3, f8e5m2, "
                "a standard integer type (char, signed/unsigned char, short, int, long, long long and "
                "their unsigned forms, std::int8_t..std::uint64_t), bool, std::complex<float> or "
                "std::complex<double>");
  /// The DType of T.
  static constexpr DType value = detail::find_dtype_of<T>().value_or(DType::U8);
};

/// `dtype_of_v<float>` is `DType::F32`; cv-qualifiers are ignored.
template <class T>
inline constexpr DType dtype_of_v = dtype_of<std::remove_cv_t<T>>::value;

/// True when T (cv-qualifiers ignored) is one of the element types.
template <class T>
inline constexpr bool is_element_type_v = detail::find_dtype_of<std::remove_cv_t<T>>().has_value();

namespace detail {
struct DTypeInfo {
  bool known = false;
  std::size_t size = 0;
  DTypeCategory category = DTypeCategory::unsigned_integer;
  std::string_view name = "unknown";
};

// One table indexed by the raw discriminant, built from the tags: size_of,
// name and category read it instead of switching over DType.
inline constexpr std::array<DTypeInfo, 256> dtype_table = [] {
  std::array<DTypeInfo, 256> t{};
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((t[static_cast<std::uint8_t>(all_dtypes[I])] =
          DTypeInfo{true, dtype_tag<all_dtypes[I]>::size, dtype_tag<all_dtypes[I]>::category,
                    dtype_tag<all_dtypes[I]>::name}),
     ...);
  }(std::make_index_sequence<dtype_count>{});
  return t;
}();

constexpr const DTypeInfo& info(DType d) noexcept { return dtype_table[static_cast<std::uint8_t>(d)]; }
}  // namespace detail

/// True when `d` is one of the 17 enumerators (a value cast from an integer may not be).
[[nodiscard]] constexpr bool is_known(DType d) noexcept { return detail::info(d).known; }
/// Size of one element in bytes; 0 for an unknown value.
[[nodiscard]] constexpr std::size_t size_of(DType d) noexcept { return detail::info(d).size; }
/// Short lower-case name ("f32", "bf16", ...); "unknown" for an unknown value.
[[nodiscard]] constexpr std::string_view name(DType d) noexcept { return detail::info(d).name; }
/// Category of a known DType.
[[nodiscard]] constexpr DTypeCategory category(DType d) noexcept { return detail::info(d).category; }
/// True for f64, f32, f16, bf16, f8e4m3, f8e5m2.
[[nodiscard]] constexpr bool is_floating(DType d) noexcept {
  return is_known(d) && category(d) == DTypeCategory::floating;
}
/// True for c64 and c128.
[[nodiscard]] constexpr bool is_complex(DType d) noexcept {
  return is_known(d) && category(d) == DTypeCategory::complex;
}

/// Parses a name produced by `name(DType)`; nullopt for anything else.
[[nodiscard]] constexpr std::optional<DType> parse_dtype(std::string_view s) noexcept {
  for (DType d : all_dtypes) {
    if (name(d) == s) return d;
  }
  return std::nullopt;
}

/// Internal: one case of visit_dtype's switch (undefined again after it).
#define POLYCOLL_VISIT_CASE(D) \
  case DType::D:               \
    return std::forward<F>(f)(dtype_tag<DType::D>{});

/// Calls `f(dtype_tag<D>{})` for the run-time `d`. This is the only switch over
/// DType in polycoll. `on_unknown()` is called for a value that is not an enumerator.
template <class F, class U>
constexpr decltype(auto) visit_dtype(DType d, F&& f, U&& on_unknown) {
  switch (d) {
    POLYCOLL_VISIT_CASE(F64)
    POLYCOLL_VISIT_CASE(F32)
    POLYCOLL_VISIT_CASE(F16)
    POLYCOLL_VISIT_CASE(BF16)
    POLYCOLL_VISIT_CASE(F8E4M3)
    POLYCOLL_VISIT_CASE(F8E5M2)
    POLYCOLL_VISIT_CASE(I64)
    POLYCOLL_VISIT_CASE(I32)
    POLYCOLL_VISIT_CASE(I16)
    POLYCOLL_VISIT_CASE(I8)
    POLYCOLL_VISIT_CASE(U64)
    POLYCOLL_VISIT_CASE(U32)
    POLYCOLL_VISIT_CASE(U16)
    POLYCOLL_VISIT_CASE(U8)
    POLYCOLL_VISIT_CASE(Bool)
    POLYCOLL_VISIT_CASE(C64)
    POLYCOLL_VISIT_CASE(C128)
#undef POLYCOLL_VISIT_CASE
  }
  return std::forward<U>(on_unknown)();
}

/// Two-argument form, for visitors that return nothing: an unknown value does
/// nothing. A visitor that returns a value must use the three-argument form and
/// say what an unknown value gives (a default-made result could read as
/// success, e.g. an empty Status).
template <class F>
  requires std::is_void_v<decltype(std::declval<F>()(dtype_tag<DType::U8>{}))>
constexpr void visit_dtype(DType d, F&& f) {
  visit_dtype(d, std::forward<F>(f), [] {});
}

namespace detail {
// Completeness: every tag round-trips and the table knows exactly dtype_count values.
constexpr bool dtype_table_complete() {
  std::size_t known = 0;
  for (const auto& e : dtype_table) known += e.known ? 1 : 0;
  return known == dtype_count;
}
static_assert(dtype_table_complete(), "polycoll: dtype_table must list every DType exactly once");
}  // namespace detail

}  // namespace polycoll
