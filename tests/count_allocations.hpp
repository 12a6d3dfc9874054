#pragma once
// Replaces the global operator new/delete with versions that count
// allocations, so a test can show that a hot path makes none. Include it in
// exactly ONE translation unit of a test executable (the replacements are
// program-wide definitions).

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace polycoll::test {
/// Heap allocations made through operator new since the program started.
inline std::atomic<std::size_t> g_allocations{0};
/// When set, the next operator new throws std::bad_alloc and clears it: a
/// test's out-of-memory at the first allocation of the code it calls.
inline std::atomic<bool> g_fail_next_allocation{false};
}  // namespace polycoll::test

// GCC cannot see that these replacements pair malloc with free throughout.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  polycoll::test::g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (polycoll::test::g_fail_next_allocation.load(std::memory_order_relaxed) &&
      polycoll::test::g_fail_next_allocation.exchange(false)) {
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
