// Per-call cost of the front end (Google Benchmark), on NoOp so that only the
// library's own work is timed: validation, DType/ReduceOp dispatch, the Status.
//   typed   Communicator<NoOp>, typed API: comm.all_reduce(std::span<float>, polycoll::sum)
//   seed    Communicator<NoOp>, seed surface: comm.all_reduce(u64, count, DType, ReduceOp)
//   any     AnyCommunicator holding a NoOp, the same seed call (+ one indirect call)
//   unrecorded  typed, on a NoOp without the flight recorder (flight_record_size 0)
// Targets: any - seed <= 3 ns per call; typed - unrecorded (the recorder's
// cost) <= 2 ns. scripts/bench_report prints the differences;
// docs/benchmarks.md has the figures.
//
// Fairness: in every variant the communicator is reached through a pointer the
// optimiser cannot see through, and the pointer, count, dtype, op and root pass
// through DoNotOptimize in every iteration. Otherwise the direct variants let
// the compiler fold the validation of a constant count and a known address at
// compile time, which AnyCommunicator's out-of-line thunk cannot, and the
// comparison would time constant folding instead of type erasure.

#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <span>

#include <polycoll/any_communicator.hpp>
#include <polycoll/backends/noop.hpp>

namespace {

using polycoll::DType;
using polycoll::ReduceOp;

std::uint64_t address(const void* p) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)); }

constexpr std::size_t elems = 16;

/// Run-time arguments, re-hidden from the optimiser in every iteration.
struct Args {
  std::array<float, elems> a{}, b{};
  std::uint64_t pa = address(a.data()), pb = address(b.data());
  std::size_t count = elems;
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;
  std::size_t root = 0;
  void hide() {
    benchmark::DoNotOptimize(pa);
    benchmark::DoNotOptimize(pb);
    benchmark::DoNotOptimize(count);
    benchmark::DoNotOptimize(dtype);
    benchmark::DoNotOptimize(op);
    benchmark::DoNotOptimize(root);
  }
};

enum class Op { all_reduce, broadcast, all_gather, reduce_scatter };

// The concrete communicator (typed and seed) or the AnyCommunicator holding one.
template <class C>
C* opaque(C& c) {
  C* p = &c;
  benchmark::DoNotOptimize(p);
  return p;
}

template <Op O, std::size_t Recorded = 64>
void typed(benchmark::State& state) {
  polycoll::Options options;
  options.flight_record_size = Recorded;
  polycoll::NoOp comm(options);
  polycoll::NoOp* c = opaque(comm);
  Args x;
  for (auto _ : state) {
    x.hide();
    // The spans are rebuilt from the hidden address and count, as a caller's would be.
    float* a = reinterpret_cast<float*>(static_cast<std::uintptr_t>(x.pa));
    float* b = reinterpret_cast<float*>(static_cast<std::uintptr_t>(x.pb));
    polycoll::Status s = [&] {
      if constexpr (O == Op::all_reduce) return c->all_reduce(std::span(a, x.count), polycoll::sum);
      if constexpr (O == Op::broadcast) return c->broadcast(std::span(a, x.count), x.root);
      if constexpr (O == Op::all_gather) return c->all_gather(std::span<const float>(a, x.count), std::span(b, x.count));
      if constexpr (O == Op::reduce_scatter) {
        return c->reduce_scatter(std::span<const float>(a, x.count), std::span(b, x.count), polycoll::sum);
      }
    }();
    benchmark::DoNotOptimize(s);
    benchmark::ClobberMemory();
  }
}

template <Op O, class C>
void seed_call(C* c, Args& x, benchmark::State& state) {
  for (auto _ : state) {
    x.hide();
    polycoll::Status s = [&] {
      if constexpr (O == Op::all_reduce) return c->all_reduce(x.pa, x.count, x.dtype, x.op);
      if constexpr (O == Op::broadcast) return c->broadcast(x.pa, x.count, x.dtype, x.root);
      if constexpr (O == Op::all_gather) return c->all_gather(x.pa, x.pb, x.count, x.dtype);
      if constexpr (O == Op::reduce_scatter) return c->reduce_scatter(x.pa, x.pb, x.count, x.dtype, x.op);
    }();
    benchmark::DoNotOptimize(s);
    benchmark::ClobberMemory();
  }
}

template <Op O>
void seed(benchmark::State& state) {
  polycoll::NoOp comm;
  Args x;
  seed_call<O>(opaque(comm), x, state);
}

template <Op O>
void any(benchmark::State& state) {
  polycoll::AnyCommunicator comm{polycoll::NoOp{}};
  Args x;
  seed_call<O>(opaque(comm), x, state);
}

}  // namespace

BENCHMARK(typed<Op::all_reduce>)->Name("typed_all_reduce");
BENCHMARK(seed<Op::all_reduce>)->Name("seed_all_reduce");
BENCHMARK(any<Op::all_reduce>)->Name("any_all_reduce");
BENCHMARK(typed<Op::all_reduce, 0>)->Name("unrecorded_all_reduce");
BENCHMARK(typed<Op::broadcast>)->Name("typed_broadcast");
BENCHMARK(seed<Op::broadcast>)->Name("seed_broadcast");
BENCHMARK(any<Op::broadcast>)->Name("any_broadcast");
BENCHMARK(typed<Op::all_gather>)->Name("typed_all_gather");
BENCHMARK(seed<Op::all_gather>)->Name("seed_all_gather");
BENCHMARK(any<Op::all_gather>)->Name("any_all_gather");
BENCHMARK(typed<Op::reduce_scatter>)->Name("typed_reduce_scatter");
BENCHMARK(seed<Op::reduce_scatter>)->Name("seed_reduce_scatter");
BENCHMARK(any<Op::reduce_scatter>)->Name("any_reduce_scatter");

BENCHMARK_MAIN();
