// Data-parallel training on the Nccl backend, one rank per visible GPU (at most
// 8), each driven by its own host thread: `train_nccl [-n ranks] [--op avg|sum]`.
// Without a usable GPU it checks that Nccl::init_all says so with an Error,
// prints SKIPPED and exits 77 (meson: SKIP), never passes.
//
// The forward and backward passes run on the host (this example has no CUDA
// kernels; a real trainer's backward kernels would sit on the user stream in
// the same place as the uploads). Gradients live in pinned host memory and in
// device memory. For every bucket, as soon as the host has computed it:
//   user stream:  upload(bucket) -> record(ready[b])
//   comm stream:  wait(ready[b]) -> all_reduce(bucket) -> record(done[b])
//   user stream:  wait(done[b])  -> download(bucket)
// all through StreamSyncOps, so the host never waits for a bucket: it computes
// bucket b-1 while bucket b is uploaded, reduced and downloaded. finish()
// waits once, for the last download. The "waiting in finish()" time printed
// is the communication the compute did not hide.
#include <polycoll/nccl.hpp>

#include <cuda_runtime.h>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "train.hpp"

namespace {

polycoll::Status cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  std::string m = "train_nccl: ";
  m.append(what).append(": ").append(cudaGetErrorName(e)).append(": ").append(cudaGetErrorString(e));
  return polycoll::fail(polycoll::Errc::backend_failure, std::move(m), static_cast<int>(e));
}

class StreamExchange {
 public:
  StreamExchange(polycoll::Nccl& comm, std::size_t n, std::size_t bucket, polycoll::ReduceOp op)
      : comm_(comm), n_(n), bucket_(bucket), op_(op) {}
  StreamExchange(const StreamExchange&) = delete;
  StreamExchange& operator=(const StreamExchange&) = delete;
  ~StreamExchange() {
    if (user_ != nullptr) (void)cudaStreamSynchronize(user_);
    if (ops_ != nullptr) {
      for (std::uint64_t e : ready_) (void)ops_->destroy_event(e);
      for (std::uint64_t e : done_) (void)ops_->destroy_event(e);
    }
    if (device_ != nullptr) (void)cudaFree(device_);
    if (host_ != nullptr) (void)cudaFreeHost(host_);
    if (user_ != nullptr) (void)cudaStreamDestroy(user_);
  }

  /// Streams, events and buffers on the communicator's device.
  polycoll::Status init() {
    ops_ = comm_.as_stream_sync();
    if (ops_ == nullptr) return polycoll::fail(polycoll::Errc::invalid_argument, "train_nccl: no StreamSyncOps");
    if (auto s = cuda(cudaSetDevice(comm_.device()), "cudaSetDevice"); !s) return s;
    if (auto s = cuda(cudaStreamCreateWithFlags(&user_, cudaStreamNonBlocking), "cudaStreamCreate"); !s) return s;
    if (auto s = cuda(cudaMallocHost(reinterpret_cast<void**>(&host_), n_ * sizeof(polycoll::bf16)), "cudaMallocHost");
        !s)
      return s;
    if (auto s = cuda(cudaMalloc(reinterpret_cast<void**>(&device_), n_ * sizeof(polycoll::bf16)), "cudaMalloc"); !s)
      return s;
    for (std::size_t b = 0; b < (n_ + bucket_ - 1) / bucket_; ++b) {
      auto r = ops_->create_event();
      if (!r) return tl::unexpected(r.error());
      ready_.push_back(*r);
      auto d = ops_->create_event();
      if (!d) return tl::unexpected(d.error());
      done_.push_back(*d);
    }
    return {};
  }

  std::span<polycoll::bf16> gradients() { return {host_, n_}; }

  polycoll::Status launch(std::size_t lo, std::size_t hi) {
    const std::size_t b = lo / bucket_, bytes = (hi - lo) * sizeof(polycoll::bf16);
    const auto user = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(user_));
    if (auto s = cuda(cudaMemcpyAsync(device_ + lo, host_ + lo, bytes, cudaMemcpyHostToDevice, user_), "upload"); !s)
      return s;
    if (auto s = ops_->record_on_stream(ready_[b], user); !s) return s;
    if (auto s = ops_->comm_stream_wait_event(ready_[b]); !s) return s;
    if (auto s = comm_.all_reduce(std::span<polycoll::bf16>(device_ + lo, hi - lo), op_); !s) return s;
    if (auto s = ops_->record_on_comm_stream(done_[b]); !s) return s;
    if (auto s = ops_->stream_wait_event(user, done_[b]); !s) return s;
    return cuda(cudaMemcpyAsync(host_ + lo, device_ + lo, bytes, cudaMemcpyDeviceToHost, user_), "download");
  }

  polycoll::Status finish() {
    if (auto s = cuda(cudaStreamSynchronize(user_), "cudaStreamSynchronize"); !s) return s;
    return comm_.sync();
  }

  polycoll::Result<bool> agree(std::span<const float> w) {
    const std::size_t world = comm_.world_size();
    float* dev = nullptr;
    if (auto s = cuda(cudaMalloc(reinterpret_cast<void**>(&dev), w.size_bytes() * (world + 1)), "cudaMalloc"); !s)
      return tl::unexpected(s.error());
    std::vector<float> all(w.size() * world);
    polycoll::Status s = cuda(cudaMemcpy(dev, w.data(), w.size_bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
    if (s) s = comm_.all_gather(std::span<const float>(dev, w.size()), std::span<float>(dev + w.size(), all.size()));
    if (s) s = comm_.sync();
    if (s) s = cuda(cudaMemcpy(all.data(), dev + w.size(), all.size() * sizeof(float), cudaMemcpyDeviceToHost),
                    "cudaMemcpy");
    (void)cudaFree(dev);
    if (!s) return tl::unexpected(s.error());
    for (std::size_t r = 0; r < world; ++r) {
      if (std::memcmp(all.data() + r * w.size(), w.data(), w.size_bytes()) != 0) return false;
    }
    return true;
  }

 private:
  polycoll::Nccl& comm_;
  std::size_t n_, bucket_;
  polycoll::ReduceOp op_;
  polycoll::StreamSyncOps* ops_ = nullptr;
  cudaStream_t user_ = nullptr;
  polycoll::bf16* host_ = nullptr;
  polycoll::bf16* device_ = nullptr;
  std::vector<std::uint64_t> ready_, done_;
};

}  // namespace

int main(int argc, char** argv) {
  std::size_t ranks = 0;  // 0: the largest world <= 8 GPUs that divides the samples
  int first = 1;
  if (argc > 2 && std::string_view(argv[1]) == "-n") {
    const std::string_view a = argv[2];
    const auto [end, ec] = std::from_chars(a.data(), a.data() + a.size(), ranks);
    if (ec != std::errc{} || end != a.data() + a.size() || ranks == 0) {
      std::fprintf(stderr, "train_nccl: -n takes a positive integer, got '%s'\n", argv[2]);
      return 2;
    }
    first = 3;
  }
  const auto params = train::parse_args(argc, argv, first);
  if (!params) {
    std::fprintf(stderr, "%s\n", params.error().message.c_str());
    return 2;
  }
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
  if (ranks == 0) {
    for (std::size_t w = std::min<std::size_t>(static_cast<std::size_t>(gpus), 8); w >= 1; --w) {
      if (params->samples % w == 0) {
        ranks = w;
        break;
      }
    }
  }
  if (ranks > static_cast<std::size_t>(gpus)) {
    std::fprintf(stderr, "train_nccl: -n %zu but only %d GPU(s) visible\n", ranks, gpus);
    return 2;
  }
  std::vector<int> devices(ranks);
  for (std::size_t r = 0; r < ranks; ++r) devices[r] = static_cast<int>(r);
  polycoll::Options options;
  options.op_timeout = std::chrono::seconds(60);
  auto comms = polycoll::Nccl::init_all(devices, options);
  if (!comms) {
    std::fprintf(stderr, "%s\n", comms.error().message.c_str());
    return 1;
  }
  const std::vector<double> want = train::reference(*params);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      polycoll::Nccl& comm = (*comms)[r];
      StreamExchange ex(comm, params->features, params->bucket, params->op);
      polycoll::Result<train::Outcome> out = tl::unexpected(polycoll::Error{});
      if (auto s = ex.init(); !s) {
        out = tl::unexpected(s.error());
      } else {
        out = train::run(comm, ex, *params);
      }
      if (!out) {
        std::fprintf(stderr, "rank %zu: %s\n", r, out.error().message.c_str());
        ++failures;
      } else if (!train::check(*out, want, *params, comm.rank(), comm.world_size(), "nccl")) {
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  return failures == 0 ? 0 : 1;
}
