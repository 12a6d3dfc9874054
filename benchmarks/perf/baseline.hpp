#pragma once
// Machine baselines that polycoll-perf prints next to its results, so that
// every ratio in docs/benchmarks.md comes from one binary, measured interleaved:
// - the 2-thread memcpy bandwidth: two threads each copy `bytes` between their
//   own pre-touched buffers at the same time (the ceiling of a shared-memory
//   collective: every byte a rank reduces or gathers is at least read and written);
// - the cache-line round trip: two threads bounce one 64-byte line (the floor
//   of any handshake between two ranks).
// Both are timed like the collectives: a block of back-to-back repetitions,
// the mean per repetition, the median over blocks.

#include <polycoll/detail/wait.hpp>
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace polycoll::perf {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

using polycoll::detail::cpu_relax;

/// Page-aligned host memory, touched once when allocated: a first touch costs
/// 11-15 us per 4 KiB page on these machines, which must not land in a timing.
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    constexpr std::size_t align = 2 * 1024 * 1024;
    const std::size_t rounded = (bytes + align - 1) / align * align;
    data_ = static_cast<std::byte*>(std::aligned_alloc(align, rounded));
    if (!data_) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    (void)madvise(data_, rounded, MADV_HUGEPAGE);  // fewer faults and TLB misses; a hint only
#endif
    std::memset(data_, 0, rounded);
  }
  HostBuffer(HostBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() { std::free(data_); }

  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }

 private:
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

/// Two threads copying `bytes` each at the same time. Buffers live as long as
/// the object, so repeated measurements (interleaved rounds) fault nothing.
class MemcpyBaseline {
 public:
  explicit MemcpyBaseline(std::size_t bytes) : bytes_(bytes) {
    for (auto& b : buffers_) b = HostBuffer(bytes);
  }

  /// Per-thread bandwidth in GB/s (1e9 B/s): bytes / (max over the two
  /// threads of the mean time of one copy in a block of `reps`), median over `blocks`.
  double bandwidth_gbps(int blocks, int reps) {
    std::vector<double> times(static_cast<std::size_t>(blocks));
    double t_thread[2] = {0, 0};
    std::barrier sync(2);
    auto body = [&](int id) {
      std::byte* src = buffers_[2 * id].data();
      std::byte* dst = buffers_[2 * id + 1].data();
      std::memcpy(dst, src, bytes_);  // warm: the pages and the TLB
      for (int b = 0; b < blocks; ++b) {
        sync.arrive_and_wait();
        const auto t0 = Clock::now();
        for (int r = 0; r < reps; ++r) {
          std::memcpy(dst, src, bytes_);
          std::atomic_signal_fence(std::memory_order_seq_cst);
        }
        t_thread[id] = seconds_since(t0) / reps;
        sync.arrive_and_wait();
        if (id == 0) times[static_cast<std::size_t>(b)] = std::max(t_thread[0], t_thread[1]);
      }
    };
    std::thread other(body, 1);
    body(0);
    other.join();
    return static_cast<double>(bytes_) / median(times) / 1e9;
  }

 private:
  std::size_t bytes_;
  HostBuffer buffers_[4];
};

/// Two threads bouncing one cache line: thread A writes 2k+1 and waits for
/// 2k+2, thread B waits for 2k+1 and writes 2k+2. Returns the median over
/// `blocks` of the mean round trip in a block of `per_block`, in microseconds.
inline double cache_line_round_trip_us(int blocks, int per_block) {
  struct alignas(64) Line {
    std::atomic<std::uint64_t> v{0};
  };
  Line line;
  const std::uint64_t total = static_cast<std::uint64_t>(blocks + 1) * static_cast<std::uint64_t>(per_block);
  std::thread b([&] {
    for (std::uint64_t k = 0; k < total; ++k) {
      while (line.v.load(std::memory_order_acquire) != 2 * k + 1) cpu_relax();
      line.v.store(2 * k + 2, std::memory_order_release);
    }
  });
  std::vector<double> times;
  std::uint64_t k = 0;
  for (int blk = 0; blk <= blocks; ++blk) {  // block 0 warms up and is dropped
    const auto t0 = Clock::now();
    for (int i = 0; i < per_block; ++i, ++k) {
      line.v.store(2 * k + 1, std::memory_order_release);
      while (line.v.load(std::memory_order_acquire) != 2 * k + 2) cpu_relax();
    }
    if (blk > 0) times.push_back(seconds_since(t0) / per_block * 1e6);
  }
  b.join();
  return median(times);
}

}  // namespace polycoll::perf
