// Links, never runs: every typed call on Nccl for every dtype (the
// reductions with a run-time op, which reach every pair NCCL reduces), in a
// TU of the compiled mode. Such a TU sees Nccl's members declared only
// (backends/nccl.hpp) and calls libpolycoll's instantiations
// (src/nccl.cpp); a member template the front end reaches that the library
// does not instantiate is an undefined symbol here, so the build fails.
#include <polycoll/backends/nccl.hpp>

#include <array>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

namespace {

using namespace polycoll;

template <class T>
int every_call(Nccl& comm) {
  constexpr DType D = dtype_of_v<T>;
  // Arrays, not vectors: std::vector<bool> has no span. Run with one rank.
  if (comm.world_size() != 1) return 1;
  std::array<T, 8> a{}, b{};
  const std::array<std::size_t, 1> counts{1};
  int bad = 0;
  if constexpr (supports_reduction_v<Nccl, D, ReduceOp::Sum> || supports_reduction_v<Nccl, D, ReduceOp::Max>) {
    const ReduceOp op = supports_reduction_v<Nccl, D, ReduceOp::Sum> ? ReduceOp::Sum : ReduceOp::Max;
    bad += !comm.all_reduce(std::span(a), op);
    bad += !comm.all_reduce(std::span<const T>(a), std::span(b).first(8), op);
    bad += !comm.all_reduce_value(a[0], op);
    bad += !comm.reduce(std::span<const T>(a), std::span(b).first(8), op, 0);
    bad += !comm.reduce_scatter(std::span<const T>(b), std::span(a).first(1), op);
  }
  bad += !comm.broadcast(std::span(a), 0);
  bad += !comm.all_gather(std::span<const T>(a).first(1), std::span(b).first(comm.world_size()));
  bad += !comm.gather(std::span<const T>(a).first(1), std::span(b).first(comm.world_size()), 0);
  bad += !comm.scatter(std::span<const T>(b).first(comm.world_size()), std::span(a).first(1), 0);
  bad += !comm.all_to_all(std::span<const T>(b).first(comm.world_size()), std::span(a).first(comm.world_size()));
  bad += !comm.all_gather_v(std::span<const T>(a).first(1), std::span(b).first(comm.world_size()), counts);
  bad += !comm.all_to_all_v(std::span<const T>(b).first(comm.world_size()), counts, std::span(a).first(comm.world_size()),
                            counts);
  bad += !comm.send(std::span<const T>(a), 0, 1);
  bad += !comm.recv(std::span(a), 0, 1);
  bad += !comm.send_recv(std::span<const T>(a), 0, std::span(b).first(8), 0, 2);
  return bad;
}

template <std::size_t... I>
int every_dtype(Nccl& comm, std::index_sequence<I...>) {
  return (every_call<typename dtype_tag<all_dtypes[I]>::type>(comm) + ...);
}

}  // namespace

int main() {
  auto comms = Nccl::init_all(std::array<int, 1>{0});
  if (!comms) return 0;  // linking is the test; running it needs a GPU
  return every_dtype((*comms)[0], std::make_index_sequence<dtype_count>{}) == 0 ? 0 : 1;
}
