#pragma once
// The polycoll-perf driver of the Threads backend, directly (Communicator<Threads>)
// or through AnyCommunicator: n ranks as n threads of this process, host memory.

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include <polycoll/any_communicator.hpp>
#include <polycoll/backends/threads.hpp>

#include "baseline.hpp"
#include "harness.hpp"
#include "plain_native.hpp"

namespace polycoll::perf {

/// `Erased`: drive the communicators through AnyCommunicator (polycoll-perf-any).
template <bool Erased>
struct ThreadsDriver {
  using Comm = std::conditional_t<Erased, AnyCommunicator, Threads>;
  static constexpr std::string_view name = Erased ? "any" : "threads";
  static constexpr std::string_view native_name =
      "per rank, on private memory, the memcpy/reduce loops that move the same bytes as the Threads algorithm "
      "(benchmarks/perf/plain_native.hpp), no synchronisation";

  ThreadsDriver(int&, char**) {}

  template <class Body>
  int launch(const Args& a, Body body) {
    auto comms = Threads::create(a.ranks);
    if (!comms) {
      std::fprintf(stderr, "polycoll-perf-%.*s: %s\n", static_cast<int>(name.size()), name.data(),
                   comms.error().message.c_str());
      return 2;
    }
    std::vector<Comm> ranks;
    ranks.reserve(a.ranks);
    for (auto& c : *comms) ranks.emplace_back(std::move(c));
    std::vector<int> rc(a.ranks, 0);
    std::vector<std::thread> threads;
    threads.reserve(a.ranks);
    for (std::size_t r = 0; r < a.ranks; ++r) threads.emplace_back([&, r] { rc[r] = body(ranks[r]); });
    for (auto& t : threads) t.join();
    int worst = 0;
    for (int v : rc) worst = std::max(worst, v);
    return worst;
  }

  void* alloc(std::size_t bytes) {
    auto b = std::make_unique<HostBuffer>(bytes);
    void* p = b->data();
    std::lock_guard lock(mutex_);
    buffers_.push_back(std::move(b));
    return p;
  }
  void release(void* p) {
    std::lock_guard lock(mutex_);
    std::erase_if(buffers_, [p](const std::unique_ptr<HostBuffer>& b) { return b->data() == p; });
  }
  void upload(void* dst, const void* host, std::size_t bytes) {
    if (bytes) std::memcpy(dst, host, bytes);
  }
  void download(void* host, const void* src, std::size_t bytes) {
    if (bytes) std::memcpy(host, src, bytes);
  }

  Status native(Comm&, const NativeCall& c) { return plain_native(c); }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<HostBuffer>> buffers_;
};

}  // namespace polycoll::perf
