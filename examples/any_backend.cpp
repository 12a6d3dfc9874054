// One binary, the backend chosen at run time through AnyCommunicator:
//
//   any_backend --backend threads [-n 4]      n ranks as threads of this process
//   mpiexec -n 4 any_backend --backend mpi    one rank per MPI process
//   any_backend --backend nccl [-n gpus]      one rank per GPU (default: every visible GPU, at most 8)
//
// Every rank runs the same small computation on the seed surface (addresses,
// run-time DType and ReduceOp), in host memory or, for nccl, in device memory,
// and checks it against closed forms: pi by the midpoint rule (all_reduce sum),
// the ranks (all_gather), a value from the last rank (broadcast), a ring shift
// (send/recv), and reduce_scatter. Exit status 0 when every rank's checks
// hold, 1 when one fails, 2 for bad flags or a backend this build lacks, 77
// (SKIP) for nccl without a usable GPU.
#include <polycoll/polycoll.hpp>

#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#if POLYCOLL_HAS_NCCL
#include <cuda_runtime.h>
#endif

namespace {

using polycoll::DType;
using polycoll::ReduceOp;
using polycoll::Result;
using polycoll::Status;

Status usage(std::string what) {
  what.append("\nusage: any_backend --backend threads|mpi|nccl [-n ranks]");
  return polycoll::fail(polycoll::Errc::invalid_argument, std::move(what));
}

/// Where the buffers live: host memory (threads, mpi) or device memory (nccl).
class Memory {
 public:
  virtual ~Memory() = default;
  virtual Result<std::uint64_t> alloc(std::size_t bytes) = 0;
  virtual Status put(std::uint64_t dst, const void* src, std::size_t bytes) = 0;
  virtual Status get(void* dst, std::uint64_t src, std::size_t bytes) = 0;
};

class HostMemory final : public Memory {
 public:
  Result<std::uint64_t> alloc(std::size_t bytes) override {
    blocks_.push_back(std::make_unique<std::byte[]>(bytes == 0 ? 1 : bytes));
    return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(blocks_.back().get()));
  }
  Status put(std::uint64_t dst, const void* src, std::size_t bytes) override {
    std::memcpy(reinterpret_cast<void*>(static_cast<std::uintptr_t>(dst)), src, bytes);
    return {};
  }
  Status get(void* dst, std::uint64_t src, std::size_t bytes) override {
    std::memcpy(dst, reinterpret_cast<const void*>(static_cast<std::uintptr_t>(src)), bytes);
    return {};
  }

 private:
  std::vector<std::unique_ptr<std::byte[]>> blocks_;
};

#if POLYCOLL_HAS_NCCL
Status cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  std::string m = "any_backend: ";
  m.append(what).append(": ").append(cudaGetErrorName(e)).append(": ").append(cudaGetErrorString(e));
  return polycoll::fail(polycoll::Errc::backend_failure, std::move(m), static_cast<int>(e));
}

class DeviceMemory final : public Memory {
 public:
  explicit DeviceMemory(int device) : device_(device) {}
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() override {
    for (void* p : blocks_) (void)cudaFree(p);
  }
  Result<std::uint64_t> alloc(std::size_t bytes) override {
    void* p = nullptr;
    if (auto s = cuda(cudaSetDevice(device_), "cudaSetDevice"); !s) return tl::unexpected(s.error());
    if (auto s = cuda(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc"); !s) return tl::unexpected(s.error());
    blocks_.push_back(p);
    return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
  }
  // Synchronous copies on the legacy stream: done before the next collective is submitted.
  Status put(std::uint64_t dst, const void* src, std::size_t bytes) override {
    return cuda(cudaMemcpy(reinterpret_cast<void*>(static_cast<std::uintptr_t>(dst)), src, bytes,
                           cudaMemcpyHostToDevice),
                "cudaMemcpy");
  }
  Status get(void* dst, std::uint64_t src, std::size_t bytes) override {
    return cuda(cudaMemcpy(dst, reinterpret_cast<const void*>(static_cast<std::uintptr_t>(src)), bytes,
                           cudaMemcpyDeviceToHost),
                "cudaMemcpy");
  }

 private:
  int device_;
  std::vector<void*> blocks_;
};
#endif

/// A buffer of n T in `mem`, filled from `init`.
template <class T>
Result<std::uint64_t> make(Memory& mem, const std::vector<T>& init) {
  auto a = mem.alloc(init.size() * sizeof(T));
  if (!a) return a;
  if (auto s = mem.put(*a, init.data(), init.size() * sizeof(T)); !s) return tl::unexpected(s.error());
  return a;
}

template <class T>
Result<std::vector<T>> read(Memory& mem, std::uint64_t a, std::size_t n) {
  std::vector<T> v(n);
  if (auto s = mem.get(v.data(), a, n * sizeof(T)); !s) return tl::unexpected(s.error());
  return v;
}

// Early returns of the error branch, to keep compute() readable (undefined after it).
#define TRY(expr)                                                                           \
  do {                                                                                      \
    if (auto try_status_ = (expr); !try_status_) return tl::unexpected(try_status_.error()); \
  } while (0)
#define TRY_ASSIGN(var, expr)                                       \
  auto var##_result_ = (expr);                                      \
  if (!var##_result_) return tl::unexpected(var##_result_.error()); \
  auto var = std::move(*var##_result_)

/// The computation and its checks on one rank. Returns the failed checks' names ("" when all hold).
Result<std::string> compute(polycoll::AnyCommunicator& comm, Memory& mem, double& pi) {
  const std::size_t w = comm.world_size(), r = comm.rank();
  std::string failed;
  // pi = integral of 4 / (1 + x^2) over [0, 1], midpoint rule; rank r takes intervals r, r + w, ...
  constexpr std::size_t intervals = 100000;
  double part = 0.0;
  for (std::size_t i = r; i < intervals; i += w) {
    const double x = (static_cast<double>(i) + 0.5) / intervals;
    part += 4.0 / (1.0 + x * x) / intervals;
  }
  TRY_ASSIGN(sum, make<double>(mem, {part}));
  TRY(comm.all_reduce(sum, 1, DType::F64, ReduceOp::Sum));
  // The ranks, gathered.
  TRY_ASSIGN(mine, make<std::int32_t>(mem, {static_cast<std::int32_t>(r)}));
  TRY_ASSIGN(ranks, make<std::int32_t>(mem, std::vector<std::int32_t>(w, -1)));
  TRY(comm.all_gather(mine, ranks, 1, DType::I32));
  // A value from the last rank.
  TRY_ASSIGN(bcast, make<float>(mem, {r + 1 == w ? 2.5f : 0.0f}));
  TRY(comm.broadcast(bcast, 1, DType::F32, w - 1));
  // reduce_scatter: block b of rank q holds (q + 1) * (b + 1); block r of the sum is (r + 1) * w (w + 1) / 2.
  std::vector<std::int64_t> blocks(w);
  for (std::size_t b = 0; b < w; ++b) blocks[b] = static_cast<std::int64_t>((r + 1) * (b + 1));
  TRY_ASSIGN(rs_send, make<std::int64_t>(mem, blocks));
  TRY_ASSIGN(rs_recv, make<std::int64_t>(mem, {0}));
  TRY(comm.reduce_scatter(rs_send, rs_recv, 1, DType::I64, ReduceOp::Sum));
  // Ring: send my rank to the next, receive the previous one's.
  TRY_ASSIGN(out, make<std::uint64_t>(mem, {r}));
  TRY_ASSIGN(in, make<std::uint64_t>(mem, {~0ull}));
  TRY(comm.send(out, 1, DType::U64, (r + 1) % w, 7));
  TRY(comm.recv(in, 1, DType::U64, (r + w - 1) % w, 7));
  TRY(comm.sync());

  TRY_ASSIGN(got_sum, read<double>(mem, sum, 1));
  pi = got_sum[0];
  if (std::abs(pi - 3.14159265358979323846) > 1e-9) failed += " all_reduce";
  TRY_ASSIGN(got_ranks, read<std::int32_t>(mem, ranks, w));
  for (std::size_t q = 0; q < w; ++q) {
    if (got_ranks[q] != static_cast<std::int32_t>(q)) {
      failed += " all_gather";
      break;
    }
  }
  TRY_ASSIGN(got_bcast, read<float>(mem, bcast, 1));
  if (got_bcast[0] != 2.5f) failed += " broadcast";
  TRY_ASSIGN(got_rs, read<std::int64_t>(mem, rs_recv, 1));
  if (got_rs[0] != static_cast<std::int64_t>((r + 1) * w * (w + 1) / 2)) failed += " reduce_scatter";
  TRY_ASSIGN(got_in, read<std::uint64_t>(mem, in, 1));
  if (got_in[0] != (r + w - 1) % w) failed += " send/recv";
  return failed;
}
#undef TRY
#undef TRY_ASSIGN

/// Runs compute() on one rank and reports; true when every check holds.
bool run_rank(polycoll::AnyCommunicator& comm, Memory& mem) {
  double pi = 0.0;
  auto r = compute(comm, mem, pi);
  if (!r) {
    std::fprintf(stderr, "rank %zu: %s\n", comm.rank(), r.error().message.c_str());
    return false;
  }
  if (!r->empty()) std::fprintf(stderr, "rank %zu [%.*s]: WRONG:%s\n", comm.rank(),
                                static_cast<int>(comm.backend_name().size()), comm.backend_name().data(), r->c_str());
  if (comm.rank() == 0) {
    std::printf("any_backend [%.*s] on %zu rank(s): pi = %.12f, all_gather, broadcast, reduce_scatter, send/recv: %s\n",
                static_cast<int>(comm.backend_name().size()), comm.backend_name().data(), comm.world_size(), pi,
                r->empty() ? "ok" : "WRONG");
  }
  return r->empty();
}

/// Ranks as threads, each with its own AnyCommunicator and Memory.
template <class MakeMemory>
int run_threads(std::vector<polycoll::AnyCommunicator>& comms, MakeMemory make_memory) {
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (auto& c : comms) {
    threads.emplace_back([&failures, &c, &make_memory] {
      auto mem = make_memory(c);
      if (!run_rank(c, *mem)) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  return failures == 0 ? 0 : 1;
}

int run_backend(std::string_view backend, std::size_t n, bool n_given, int& argc, char**& argv) {
  if (backend == "threads") {
    auto made = polycoll::Threads::create(n_given ? n : 4);
    if (!made) {
      std::fprintf(stderr, "%s\n", made.error().message.c_str());
      return 1;
    }
    std::vector<polycoll::AnyCommunicator> comms;
    for (auto& t : *made) comms.emplace_back(std::move(t));
    return run_threads(comms, [](polycoll::AnyCommunicator&) { return std::make_unique<HostMemory>(); });
  }
  if (backend == "mpi") {
#if POLYCOLL_HAS_MPI
    if (n_given) {
      std::fprintf(stderr, "%s\n", usage("any_backend: with mpi the world is mpiexec's: mpiexec -n N any_backend --backend mpi")
                                       .error().message.c_str());
      return 2;
    }
    polycoll::mpi::Environment env(argc, argv);
    if (!env.ok()) {
      std::fprintf(stderr, "%s\n", env.status().error().message.c_str());
      return 1;
    }
    auto made = polycoll::Mpi::world();
    if (!made) {
      std::fprintf(stderr, "%s\n", made.error().message.c_str());
      return 1;
    }
    polycoll::AnyCommunicator comm{std::move(*made)};
    HostMemory mem;
    int ok = run_rank(comm, mem) ? 1 : 0;
    // Every rank's exit status says whether every rank passed.
    if (auto s = comm.all_reduce(static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&ok)), 1, DType::I32,
                                 ReduceOp::Min);
        !s || !comm.sync()) {
      return 1;
    }
    return ok == 1 ? 0 : 1;
#else
    (void)argc;
    (void)argv;
    std::fprintf(stderr, "any_backend: this build has no Mpi backend (configure polycoll with -Dmpi=enabled)\n");
    return 2;
#endif
  }
  if (backend == "nccl") {
#if POLYCOLL_HAS_NCCL
    int gpus = 0;
    if (const cudaError_t e = cudaGetDeviceCount(&gpus); e != cudaSuccess || gpus == 0) {
      (void)cudaGetLastError();
      const int device = 0;
      auto made = polycoll::Nccl::init_all(std::span<const int>(&device, 1));
      if (made) {
        std::fprintf(stderr, "FAIL: cudaGetDeviceCount reports no GPU but Nccl::init_all succeeded\n");
        return 1;
      }
      std::fprintf(stderr, "SKIPPED: no CUDA device (%s); Nccl::init_all says: %s\n",
                   e != cudaSuccess ? cudaGetErrorName(e) : "0 devices", made.error().message.c_str());
      return 77;
    }
    const std::size_t world = n_given ? n : std::min<std::size_t>(static_cast<std::size_t>(gpus), 8);
    if (world > static_cast<std::size_t>(gpus)) {
      std::fprintf(stderr, "any_backend: -n %zu but only %d GPU(s) visible\n", world, gpus);
      return 2;
    }
    std::vector<int> devices(world);
    for (std::size_t i = 0; i < world; ++i) devices[i] = static_cast<int>(i);
    polycoll::Options options;
    options.op_timeout = std::chrono::seconds(60);
    auto made = polycoll::Nccl::init_all(devices, options);
    if (!made) {
      std::fprintf(stderr, "%s\n", made.error().message.c_str());
      return 1;
    }
    std::vector<polycoll::AnyCommunicator> comms;
    for (auto& c : *made) comms.emplace_back(std::move(c));
    return run_threads(comms, [](polycoll::AnyCommunicator& c) {
      return std::make_unique<DeviceMemory>(c.target<polycoll::Nccl>()->device());
    });
#else
    std::fprintf(stderr, "any_backend: this build has no Nccl backend (configure polycoll with -Dnccl=enabled)\n");
    return 2;
#endif
  }
  std::string m = "any_backend: unknown backend '";
  m.append(backend).append("'");
  std::fprintf(stderr, "%s\n", usage(std::move(m)).error().message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string_view backend;
  std::size_t n = 0;
  bool n_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--backend" && i + 1 < argc) {
      backend = argv[++i];
    } else if (a == "-n" && i + 1 < argc) {
      const std::string_view v = argv[++i];
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc{} || end != v.data() + v.size() || n == 0 || n > 64) {
        std::fprintf(stderr, "%s\n", usage("any_backend: -n takes an integer in [1, 64]").error().message.c_str());
        return 2;
      }
      n_given = true;
    } else {
      std::string m = "any_backend: unknown argument '";
      m.append(a).append("'");
      std::fprintf(stderr, "%s\n", usage(std::move(m)).error().message.c_str());
      return 2;
    }
  }
  if (backend.empty()) {
    std::fprintf(stderr, "%s\n", usage("any_backend: --backend is required").error().message.c_str());
    return 2;
  }
  return run_backend(backend, n, n_given, argc, argv);
}
