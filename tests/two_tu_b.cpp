// Two-translation-unit test, part B (see two_tu_a.cpp).
#include <polycoll/polycoll.hpp>

#include <array>

int polycoll_two_tu_b() {
  polycoll::NoOp comm;
  std::array<double, 2> s{1, 2}, r{};
  int ok = comm.all_gather(std::span<const double>(s), std::span<double>(r)) && r[1] == 2.0 ? 1 : 0;
  ok += polycoll::size_of(polycoll::DType::BF16) == 2 ? 1 : 0;
  polycoll::log(polycoll::LogLevel::debug, "two_tu_b");
  ok += static_cast<float>(polycoll::bf16(2.0f)) == 2.0f ? 1 : 0;
  return ok;
}
