// Compile-cost probe (scripts/compile_cost): polycoll.hpp and one call of every
// operation, typed and seed surface, on Threads and through AnyCommunicator.
#include <polycoll/polycoll.hpp>

#include <cstdint>
#include <span>
#include <vector>

int probe(polycoll::Threads& comm) {
  std::vector<float> a(64), b(64 * comm.world_size());
  auto addr = [](const void* p) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)); };
  int bad = 0;
  bad += !comm.all_reduce(std::span(a), polycoll::sum);
  bad += !comm.all_reduce(std::span(a), polycoll::ReduceOp::Max);
  bad += !comm.broadcast(std::span(a), 0);
  bad += !comm.all_gather(std::span<const float>(a), std::span(b));
  bad += !comm.reduce_scatter(std::span<const float>(b), std::span(a), polycoll::sum);
  bad += !comm.send(std::span<const float>(a), 0, 1);
  bad += !comm.recv(std::span(a), 0, 1);
  bad += !comm.sync();
  bad += !comm.barrier();
  bad += !comm.all_reduce(addr(a.data()), a.size(), polycoll::DType::F32, polycoll::ReduceOp::Sum);
  bad += !comm.broadcast(addr(a.data()), a.size(), polycoll::DType::F32, 0);
  bad += !comm.all_gather(addr(a.data()), addr(b.data()), a.size(), polycoll::DType::F32);
  bad += !comm.reduce_scatter(addr(b.data()), addr(a.data()), a.size(), polycoll::DType::F32, polycoll::ReduceOp::Sum);
  auto sub = comm.split(0, 0);
  bad += !sub;
  return bad;
}

int probe_any(polycoll::AnyCommunicator& comm) {
  std::vector<float> a(64), b(64 * comm.world_size());
  auto addr = [](const void* p) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)); };
  int bad = 0;
  bad += !comm.all_reduce(addr(a.data()), a.size(), polycoll::DType::F32, polycoll::ReduceOp::Sum);
  bad += !comm.broadcast(addr(a.data()), a.size(), polycoll::DType::F32, 0);
  bad += !comm.all_gather(addr(a.data()), addr(b.data()), a.size(), polycoll::DType::F32);
  bad += !comm.reduce_scatter(addr(b.data()), addr(a.data()), a.size(), polycoll::DType::F32, polycoll::ReduceOp::Sum);
  bad += !comm.send(addr(a.data()), a.size(), polycoll::DType::F32, 0, 1);
  bad += !comm.recv(addr(a.data()), a.size(), polycoll::DType::F32, 0, 1);
  bad += !comm.sync();
  bad += !comm.barrier();
  auto sub = comm.split(0, 0);
  bad += !sub;
  return bad;
}
