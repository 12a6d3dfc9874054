#pragma once
// Waiting on an atomic: a short bounded spin, then C++20 atomic wait (no
// deadline) or a polling back-off (with a deadline, which atomic wait lacks).
// Internal.

#include <atomic>
#include <cstdint>
#include <optional>

#include <polycoll/detail/std_parts.hpp>

namespace polycoll::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

enum class WaitResult { ready, timeout, aborted };

using Clock = std::chrono::steady_clock;

/// Deadline `timeout` from now, or none.
/// Inlined: it runs on every collective, and without a timeout it is one test.
[[gnu::always_inline]] inline std::optional<Clock::time_point> deadline_after(
    const std::optional<std::chrono::milliseconds>& timeout) {
  if (!timeout) [[likely]] return std::nullopt;
  return Clock::now() + *timeout;
}

/// Waits until `ready(a.load())`, `aborted` is set, or the deadline passes.
/// Whoever changes `a` calls `a.notify_all()`. An abort must also change `a`
/// (so that an untimed atomic wait returns) before notifying.
template <class T, class Ready>
WaitResult wait_until(const std::atomic<T>& a, Ready ready, const std::atomic<bool>& aborted,
                      const std::optional<Clock::time_point>& deadline, unsigned spin) noexcept {
  T v = a.load(std::memory_order_acquire);
  if (ready(v)) [[likely]] return aborted.load(std::memory_order_acquire) ? WaitResult::aborted : WaitResult::ready;
  // A first stretch of plain loads: a `pause` costs up to ~140 cycles on
  // current x86 cores, which would add its length to every short wait.
  constexpr unsigned tight = 64;
  for (unsigned t = 0; t < tight && spin != 0; ++t) {
    v = a.load(std::memory_order_acquire);
    if (ready(v)) return aborted.load(std::memory_order_acquire) ? WaitResult::aborted : WaitResult::ready;
  }
  unsigned i = 0;
  auto pause = std::chrono::microseconds(20);
  while (!ready(v)) {
    if (aborted.load(std::memory_order_acquire)) return WaitResult::aborted;
    if (i < spin) {
      ++i;
      cpu_relax();
    } else if (!deadline) {
      a.wait(v, std::memory_order_acquire);
    } else {
      const auto now = Clock::now();
      if (now >= *deadline) return WaitResult::timeout;
      if (i < spin + 16) {
        ++i;
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::min<Clock::duration>(pause, *deadline - now));
        if (pause < std::chrono::milliseconds(1)) pause *= 2;
      }
    }
    v = a.load(std::memory_order_acquire);
  }
  return aborted.load(std::memory_order_acquire) ? WaitResult::aborted : WaitResult::ready;
}

}  // namespace polycoll::detail
