// dtype.hpp, reduce_op.hpp, error.hpp, log.hpp.
#include <catch2/catch.hpp>

#include <polycoll/communicator.hpp>
#include <polycoll/dtype.hpp>
#include <polycoll/error.hpp>
#include <polycoll/log.hpp>
#include <polycoll/reduce_op.hpp>

#include <string>
#include <vector>

namespace {

using namespace polycoll;

template <class F>
constexpr bool two_arg_visit_ok = requires(F f) { visit_dtype(DType::F32, f); };

TEST_CASE("DType discriminants are numr's and stable", "[dtype]") {
  STATIC_REQUIRE(static_cast<int>(DType::F64) == 0);
  STATIC_REQUIRE(static_cast<int>(DType::F8E5M2) == 5);
  STATIC_REQUIRE(static_cast<int>(DType::I64) == 10);
  STATIC_REQUIRE(static_cast<int>(DType::I8) == 13);
  STATIC_REQUIRE(static_cast<int>(DType::U64) == 20);
  STATIC_REQUIRE(static_cast<int>(DType::U8) == 23);
  STATIC_REQUIRE(static_cast<int>(DType::Bool) == 30);
  STATIC_REQUIRE(static_cast<int>(DType::C64) == 40);
  STATIC_REQUIRE(static_cast<int>(DType::C128) == 41);
  STATIC_REQUIRE(all_dtypes.size() == dtype_count);
}

TEST_CASE("size_of, name and parse_dtype agree for every DType", "[dtype]") {
  struct Row {
    DType d;
    std::size_t size;
    const char* name;
  };
  const std::vector<Row> rows = {
      {DType::F64, 8, "f64"},  {DType::F32, 4, "f32"},  {DType::F16, 2, "f16"},   {DType::BF16, 2, "bf16"},
      {DType::F8E4M3, 1, "f8e4m3"}, {DType::F8E5M2, 1, "f8e5m2"}, {DType::I64, 8, "i64"}, {DType::I32, 4, "i32"},
      {DType::I16, 2, "i16"},  {DType::I8, 1, "i8"},    {DType::U64, 8, "u64"},   {DType::U32, 4, "u32"},
      {DType::U16, 2, "u16"},  {DType::U8, 1, "u8"},    {DType::Bool, 1, "bool"}, {DType::C64, 8, "c64"},
      {DType::C128, 16, "c128"}};
  REQUIRE(rows.size() == dtype_count);
  for (const auto& row : rows) {
    INFO(row.name);
    CHECK(is_known(row.d));
    CHECK(size_of(row.d) == row.size);
    CHECK(name(row.d) == row.name);
    CHECK(parse_dtype(row.name) == row.d);
    CHECK(visit_dtype(row.d, [](auto t) { return t.value; }, [] { return DType::U8; }) == row.d);
  }
  CHECK_FALSE(is_known(static_cast<DType>(6)));
  CHECK_FALSE(is_known(static_cast<DType>(255)));
  CHECK(size_of(static_cast<DType>(99)) == 0);
  CHECK(name(static_cast<DType>(99)) == "unknown");
  CHECK_FALSE(parse_dtype("float32").has_value());
  CHECK(visit_dtype(static_cast<DType>(99), [](auto) { return 1; }, [] { return -1; }) == -1);
  int visited = 0;
  visit_dtype(DType::F32, [&](auto) { ++visited; });
  visit_dtype(static_cast<DType>(99), [&](auto) { ++visited; });  // unknown: nothing happens
  CHECK(visited == 1);
  // A value-returning visitor must say what an unknown value gives.
  STATIC_REQUIRE(two_arg_visit_ok<decltype([](auto) {})>);
  STATIC_REQUIRE_FALSE(two_arg_visit_ok<decltype([](auto) { return 1; })>);
}

TEST_CASE("dtype_of_v maps the C++ element types", "[dtype]") {
  STATIC_REQUIRE(dtype_of_v<double> == DType::F64);
  STATIC_REQUIRE(dtype_of_v<const float> == DType::F32);
  STATIC_REQUIRE(dtype_of_v<f16> == DType::F16);
  STATIC_REQUIRE(dtype_of_v<bf16> == DType::BF16);
  STATIC_REQUIRE(dtype_of_v<f8e4m3> == DType::F8E4M3);
  STATIC_REQUIRE(dtype_of_v<f8e5m2> == DType::F8E5M2);
  STATIC_REQUIRE(dtype_of_v<std::int8_t> == DType::I8);
  STATIC_REQUIRE(dtype_of_v<std::uint64_t> == DType::U64);
  STATIC_REQUIRE(dtype_of_v<bool> == DType::Bool);
  STATIC_REQUIRE(dtype_of_v<std::complex<float>> == DType::C64);
  STATIC_REQUIRE(dtype_of_v<std::complex<double>> == DType::C128);
  STATIC_REQUIRE(std::is_same_v<dtype_tag<DType::U16>::type, std::uint16_t>);
  STATIC_REQUIRE_FALSE(is_element_type_v<long double>);
  STATIC_REQUIRE_FALSE(is_element_type_v<char*>);
}

// Every standard integer type maps by size and signedness, like MPI's
// MPI_LONG_LONG; plain char by the platform's signedness. The other character
// types are not integers here.
template <class T>
constexpr DType by_size_and_sign() {
  constexpr bool s = std::is_signed_v<T>;
  switch (sizeof(T)) {
    case 1: return s ? DType::I8 : DType::U8;
    case 2: return s ? DType::I16 : DType::U16;
    case 4: return s ? DType::I32 : DType::U32;
    default: return s ? DType::I64 : DType::U64;
  }
}

TEST_CASE("dtype_of_v maps every standard integer type by size and signedness", "[dtype]") {
  STATIC_REQUIRE(dtype_of_v<long long> == DType::I64);
  STATIC_REQUIRE(dtype_of_v<unsigned long long> == DType::U64);
  STATIC_REQUIRE(dtype_of_v<const long long> == DType::I64);
  STATIC_REQUIRE(dtype_of_v<signed char> == DType::I8);
  STATIC_REQUIRE(dtype_of_v<unsigned char> == DType::U8);
  STATIC_REQUIRE(dtype_of_v<char> == (std::is_signed_v<char> ? DType::I8 : DType::U8));
  STATIC_REQUIRE(dtype_of_v<short> == by_size_and_sign<short>());
  STATIC_REQUIRE(dtype_of_v<unsigned short> == by_size_and_sign<unsigned short>());
  STATIC_REQUIRE(dtype_of_v<int> == by_size_and_sign<int>());
  STATIC_REQUIRE(dtype_of_v<unsigned> == by_size_and_sign<unsigned>());
  STATIC_REQUIRE(dtype_of_v<long> == by_size_and_sign<long>());
  STATIC_REQUIRE(dtype_of_v<unsigned long> == by_size_and_sign<unsigned long>());
  STATIC_REQUIRE(dtype_of_v<long long> == by_size_and_sign<long long>());
  STATIC_REQUIRE(dtype_of_v<unsigned long long> == by_size_and_sign<unsigned long long>());
  STATIC_REQUIRE_FALSE(is_element_type_v<wchar_t>);
  STATIC_REQUIRE_FALSE(is_element_type_v<char8_t>);
  STATIC_REQUIRE_FALSE(is_element_type_v<char16_t>);
  STATIC_REQUIRE_FALSE(is_element_type_v<char32_t>);
  STATIC_REQUIRE(std::is_same_v<detail::canonical_element_t<long long>, std::int64_t>);
  STATIC_REQUIRE(std::is_same_v<detail::canonical_element_t<float>, float>);
  // The exact-width types are their dtype's own type: no compiler barrier around their calls.
  STATIC_REQUIRE_FALSE(detail::AliasFence<std::int64_t>::needed);
  STATIC_REQUIRE(detail::AliasFence<const long long>::needed == !std::is_same_v<long long, std::int64_t>);
  STATIC_REQUIRE(detail::AliasFence<char>::needed);
}

TEST_CASE("ReduceOp names, parsing and visiting", "[reduce_op]") {
  for (ReduceOp op : all_reduce_ops) {
    CHECK(parse_reduce_op(name(op)) == op);
    CHECK(visit_op(op, [](auto t) { return t.value; }, [] { return ReduceOp::Sum; }) == op);
  }
  CHECK(name(static_cast<ReduceOp>(5)) == "unknown");
  CHECK_FALSE(is_known(static_cast<ReduceOp>(5)));
  CHECK(visit_op(static_cast<ReduceOp>(5), [](auto) { return 0; }, [] { return 7; }) == 7);
  STATIC_REQUIRE(decltype(polycoll::sum)::value == ReduceOp::Sum);
  STATIC_REQUIRE(decltype(polycoll::avg)::value == ReduceOp::Avg);
  // The flat names are the op:: objects themselves (docs/design.md, "Names").
  STATIC_REQUIRE(&polycoll::sum == &polycoll::op::sum);
  STATIC_REQUIRE(&polycoll::prod == &polycoll::op::prod);
  STATIC_REQUIRE(&polycoll::min == &polycoll::op::min);
  STATIC_REQUIRE(&polycoll::max == &polycoll::op::max);
  STATIC_REQUIRE(&polycoll::avg == &polycoll::op::avg);
  STATIC_REQUIRE(decltype(polycoll::op::min)::value == ReduceOp::Min);
}

TEST_CASE("Errc names and fail()", "[error]") {
  CHECK(to_string(Errc::timeout) == "timeout");
  CHECK(to_string(Errc::not_initialized) == "not_initialized");
  Status s = fail(Errc::truncated, "recv(count=2) on rank 0 of 1 [noop]: message truncated", 15);
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::truncated);
  CHECK(s.error().native == 15);
  Result<int> r = 3;
  CHECK(*r == 3);
  CHECK(ok().has_value());
}

std::vector<std::string>* g_records = nullptr;
void capture(LogLevel level, std::string_view m) noexcept {
  g_records->push_back(std::to_string(static_cast<int>(level)) + ":" + std::string(m));
}

TEST_CASE("log sink is pluggable and restorable", "[log]") {
  std::vector<std::string> records;
  g_records = &records;
  LogSink previous = set_log_sink(&capture);
  log(LogLevel::error, "one");
  log(LogLevel::warning, "two");
  CHECK(set_log_sink(previous) == &capture);
  log(LogLevel::debug, "to the default sink, not captured");
  REQUIRE(records.size() == 2);
  CHECK(records[0] == "3:one");
  CHECK(records[1] == "2:two");
}

}  // namespace
