#pragma once
// The consistency check's send-buffer rule (Options::check_consistency or
// POLYCOLL_CHECK=1): a send completes at sync(), like MPI_Isend, so its buffer
// must not change before then. A backend records a hash of each send's bytes
// when it is posted and compares it when the sender's sync() has completed
// the send; a difference is Errc::mismatch naming the send. Internal.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <polycoll/detail/call.hpp>
#include <polycoll/detail/std_parts.hpp>
#include <polycoll/error.hpp>

namespace polycoll::detail {

/// A send of at most this many bytes is copied when it is posted (an eager
/// copy, like MPI's eager protocol), on NoOp and Threads into the queued
/// message (no allocation) when no receive is posted yet, on Mpi into a
/// recycled block it sends from. A buffer reused before sync() is an error by
/// the contract (a send completes at sync()), but a small one then sends what
/// it held at the call on every host backend, not a backend-dependent value.
/// Larger sends are read until they complete. docs/benchmarks.md measures
/// the p2p latency with it.
inline constexpr std::size_t eager_bytes = 256;

/// A 64-bit hash of `bytes` bytes at `p`, eight bytes a step (the check's
/// cost is one pass over each send buffer at post and one at sync).
inline std::uint64_t hash_bytes(const void* p, std::size_t bytes) noexcept {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ bytes;
  auto mix = [&](std::uint64_t w) {
    h ^= w;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  };
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, b + i, 8);
    mix(w);
  }
  if (i < bytes) {
    std::uint64_t w = 0;
    std::memcpy(&w, b + i, bytes - i);
    mix(w ^ 0xA5);
  }
  return h;
}

/// Makes room in `v` for `more` elements beyond its size, growing at least
/// twofold as push_back would, so that the pushes that follow cannot throw.
/// Throws std::bad_alloc. For the records a backend must add after it has
/// posted work to the native library, where a failure would lose that work.
template <class T>
void reserve_more(std::vector<T>& v, std::size_t more) {
  const std::size_t need = v.size() + more;
  if (need > v.capacity()) v.reserve(std::max(need, 2 * v.capacity()));
}

/// The sends a rank posted since its last completed sync(), with their hashes.
class SendLedger {
 public:
  /// Makes room for `more` records, so that record() after a send was
  /// posted cannot throw. Throws std::bad_alloc.
  void reserve_more(std::size_t more) {
    std::lock_guard g(mutex_);
    detail::reserve_more(sends_, more);
  }

  /// Records a send of `bytes` bytes at `p` (called at post time, check on).
  void record(const CallDesc& call, const void* p, std::size_t bytes) {
    std::lock_guard g(mutex_);
    sends_.push_back({call, p, bytes, hash_bytes(p, bytes), next_++});
  }

  /// Where the records stand as a sync() begins: the sends recorded before
  /// this mark are the ones it completes.
  std::uint64_t mark() {
    std::lock_guard g(mutex_);
    return next_;
  }

  /// Compares the bytes of every send recorded before `upto` (a mark()) with
  /// their hash at post and forgets them; returns the first whose buffer
  /// changed, if any. Sends recorded since the mark (other threads, during
  /// the sync) stay for the sync that comes after them: a send completes at
  /// a sync() that began after it.
  std::optional<CallDesc> verify(std::uint64_t upto) {
    std::lock_guard g(mutex_);
    std::optional<CallDesc> changed;
    for (const Entry& e : sends_) {
      if (e.id < upto && !changed && hash_bytes(e.ptr, e.bytes) != e.hash) changed = e.call;
    }
    std::erase_if(sends_, [upto](const Entry& e) { return e.id < upto; });
    return changed;
  }

  /// Takes over `other`'s records (a communicator moved with its pending sends).
  void take(SendLedger& other) {
    if (&other == this) return;
    std::scoped_lock g(mutex_, other.mutex_);
    sends_ = std::move(other.sends_);
    next_ = other.next_;
    other.sends_.clear();
  }

  /// Forgets the recorded sends (a communicator that drops its pending work).
  void clear() noexcept {
    std::lock_guard g(mutex_);
    sends_.clear();
  }

 private:
  struct Entry {
    CallDesc call;
    const void* ptr;
    std::size_t bytes;
    std::uint64_t hash;
    std::uint64_t id;  // in recording order
  };
  std::mutex mutex_;
  std::vector<Entry> sends_;
  std::uint64_t next_ = 0;  // the next record's id
};

/// The text of the check's verdict on a changed send buffer.
inline constexpr const char* send_changed_text =
    "consistency check failed: the send buffer changed between the send and the sync() that completed it "
    "(a send completes at sync(), like MPI_Isend: do not reuse its buffer before then)";

}  // namespace polycoll::detail
