// Compile-cost probe (scripts/compile_cost): an AnyCommunicator made from
// Threads (its table holds the whole seed surface) and one all_reduce on it.
#include <polycoll/threads.hpp>

#include <cstddef>
#include <cstdint>
#include <utility>

bool probe(polycoll::Threads comm, std::uint64_t a, std::size_t n, polycoll::DType d, polycoll::ReduceOp op) {
  polycoll::AnyCommunicator any{std::move(comm)};
  return any.all_reduce(a, n, d, op).has_value();
}
