// Two-translation-unit test, part A: includes everything, uses everything. A
// non-inline function or variable defined in a header would be defined twice
// and fail to link.
#include <polycoll/polycoll.hpp>

#include <array>

int polycoll_two_tu_b();

int polycoll_two_tu_a() {
  polycoll::NoOp comm;
  std::array<float, 4> v{1, 2, 3, 4};
  polycoll::AnyCommunicator any{polycoll::NoOp{}};
  int ok = comm.all_reduce(std::span<float>(v), polycoll::sum) ? 1 : 0;
  ok += any.all_reduce(polycoll::detail::to_address(v.data()), 4, polycoll::DType::F32, polycoll::ReduceOp::Max) ? 1 : 0;
  polycoll::log(polycoll::LogLevel::debug, "two_tu_a");
  ok += static_cast<float>(polycoll::f16(1.5f)) == 1.5f ? 1 : 0;
  return ok;
}

int main() { return polycoll_two_tu_a() + polycoll_two_tu_b() == 6 ? 0 : 1; }
