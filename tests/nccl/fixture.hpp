#pragma once
// Support for the Nccl suites: device buffers, the conformance fixture (one
// rank per visible GPU, every rank driven by its own thread), and a helper
// that runs a body on every rank of a fresh communicator.
#include <polycoll/backends/nccl.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "../support.hpp"

namespace polycoll::test {

/// Visible CUDA devices (0 without a driver or GPU).
inline int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

/// n elements of T in device memory of the current device, zeroed.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n) : n_(n) {
    if (n == 0) return;
    if (cudaError_t e = cudaMalloc(&ptr_, n * sizeof(T)); e != cudaSuccess) {
      std::fprintf(stderr, "DeviceBuffer: cudaMalloc(%zu bytes): %s\n", n * sizeof(T), cudaGetErrorString(e));
      ptr_ = nullptr;  // the call under test then fails with "null with count > 0": visible
      return;
    }
    // On the legacy stream, then waited for: never a device-wide synchronisation,
    // which would wait for streams a test holds back on purpose.
    (void)cudaMemsetAsync(ptr_, 0, n * sizeof(T), cudaStreamLegacy);
    (void)cudaStreamSynchronize(cudaStreamLegacy);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(n_, o.n_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_) (void)cudaFree(ptr_);
  }
  T* data() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return n_; }
  std::uint64_t address() const noexcept { return detail::to_address(ptr_); }
  // cudaMemcpy from pageable memory may return before the DMA lands; waiting
  // for the legacy stream makes the data visible to the (non-blocking)
  // communication stream.
  void write(const Array<T>& a) {
    if (n_ == 0 || !ptr_) return;
    (void)cudaMemcpy(ptr_, a.data(), std::min(n_, a.size()) * sizeof(T), cudaMemcpyHostToDevice);
    (void)cudaStreamSynchronize(cudaStreamLegacy);
  }
  Array<T> read() const {
    Array<T> a(n_);
    if (n_ != 0 && ptr_) (void)cudaMemcpy(a.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return a;
  }

 private:
  T* ptr_ = nullptr;
  std::size_t n_ = 0;
};

/// Devices 0 .. n-1.
inline std::vector<int> first_devices(std::size_t n) {
  std::vector<int> d(n);
  std::iota(d.begin(), d.end(), 0);
  return d;
}

/// Runs body(comm, report) on every rank of `comms`, one thread per rank with
/// the rank's device current.
template <class F>
std::vector<Report> run_on(std::vector<Nccl>& comms, F& body) {
  const std::size_t w = comms.size();
  std::vector<Report> reports(w);
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < w; ++r) {
    reports[r].rank = r;
    reports[r].world = w;
    threads.emplace_back([&, r] {
      (void)cudaSetDevice(comms[r].device());
      body(comms[r], reports[r]);
    });
  }
  for (auto& t : threads) t.join();
  return reports;
}

/// A fresh communicator over devices 0 .. world-1, body on every rank, then
/// the communicators are destroyed.
template <class F>
std::vector<Report> run_fresh(std::size_t world, const Options& options, F body) {
  auto comms = Nccl::init_all(first_devices(world), options);
  if (!comms) {
    Report rep;
    rep.world = world;
    rep.failures.push_back("Nccl::init_all: " + comms.error().message);
    return {rep};
  }
  return run_on(*comms, body);
}

/// Communicators made by the conformance fixture, kept across test cases
/// (NCCL initialisation costs a second or more per world); main() clears it
/// before the CUDA runtime shuts down.
inline std::map<std::size_t, std::vector<Nccl>>& nccl_cache() {
  static std::map<std::size_t, std::vector<Nccl>> cache;
  return cache;
}

struct NcclFixture {
  using Backend = Nccl;
  template <class T>
  using Buffer = DeviceBuffer<T>;
  static constexpr bool host_memory = false;
  static constexpr bool matches_tags = false;  // NCCL has no tags: documented
  static constexpr bool split_may_be_unsupported = false;
  static constexpr std::size_t large_count = (1u << 22) / 4;  // 4 MiB of f32
  /// ncclAvg on floating types premultiplies each contribution by 1/world and
  /// NCCL adds in the element type, rounding the partial sum at every ring or
  /// tree step: up to (world + 1) half-ulps, u = 2^-(significand bits), world <= 8.
  template <class T>
  static double avg_tolerance() {
    constexpr double steps = 9;
    if constexpr (std::is_same_v<T, f8e5m2>) return steps / 8;  // u = 2^-3
    else if constexpr (std::is_same_v<T, f8e4m3>) return steps / 16;
    else if constexpr (std::is_same_v<T, bf16>) return steps / 256;
    else if constexpr (std::is_same_v<T, f16>) return steps / 2048;
    else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, std::complex<float>>) return 1e-6;
    else return 1e-12;
  }
  /// 1 .. every visible GPU (at most 8): NCCL puts one rank on one GPU.
  /// POLYCOLL_NCCL_WORLDS="1,2,8" picks some of them (to fit a time budget).
  static std::vector<std::size_t> world_sizes() {
    std::vector<std::size_t> w;
    const auto n = static_cast<std::size_t>(std::min(gpu_count(), 8));
    if (const char* env = std::getenv("POLYCOLL_NCCL_WORLDS"); env != nullptr && *env != '\0') {
      std::size_t v = 0;
      for (const char* p = env;; ++p) {
        if (*p >= '0' && *p <= '9') {
          v = v * 10 + static_cast<std::size_t>(*p - '0');
          continue;
        }
        if (v >= 1 && v <= n) w.push_back(v);
        v = 0;
        if (*p == '\0') break;
      }
      if (!w.empty()) return w;
    }
    for (std::size_t i = 1; i <= n; ++i) w.push_back(i);
    return w;
  }
  template <class F>
  static std::vector<Report> run(std::size_t world, F body) {
    auto& cache = nccl_cache();
    auto it = cache.find(world);
    if (it == cache.end()) {
      auto comms = Nccl::init_all(first_devices(world));
      if (!comms) {
        Report rep;
        rep.world = world;
        rep.failures.push_back("Nccl::init_all: " + comms.error().message);
        return {rep};
      }
      it = cache.emplace(world, std::move(*comms)).first;
    }
    return run_on(it->second, body);
  }
};

/// Collects what polycoll logs while alive (the drop contract's records).
class LogCapture {
 public:
  LogCapture() { previous_ = set_log_sink(&sink); lines().clear(); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  ~LogCapture() { set_log_sink(previous_); }
  std::vector<std::string> take() {
    std::lock_guard g(mutex());
    return std::exchange(lines(), {});
  }

 private:
  static void sink(LogLevel, std::string_view m) noexcept {
    try {
      std::lock_guard g(mutex());
      lines().emplace_back(m);
    } catch (...) {
    }
  }
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<std::string>& lines() {
    static std::vector<std::string> l;
    return l;
  }
  LogSink previous_ = nullptr;
};

/// Holds a CUDA stream back until released (or a bound passes): a host
/// function that waits, so a test can queue work behind it without a kernel.
class Gate {
 public:
  Gate() = default;
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  ~Gate() { open(); }
  /// Blocks `stream` at this point until open().
  cudaError_t block(cudaStream_t stream) { return cudaLaunchHostFunc(stream, &wait, this); }
  void open() noexcept { open_.store(true, std::memory_order_release); }
  /// Opens after `delay` from another thread (joined by the destructor).
  void open_after(std::chrono::milliseconds delay) {
    opener_ = std::jthread([this, delay] {
      std::this_thread::sleep_for(delay);
      open();
    });
  }

 private:
  static void CUDART_CB wait(void* self) {
    auto* g = static_cast<Gate*>(self);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!g->open_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  std::atomic<bool> open_{false};
  std::jthread opener_;
};

}  // namespace polycoll::test
