#pragma once
// Pending MPI requests of one communicator: the MPI_Request array completed
// by sync() and, index for index, what each request is (for
// errors and timeout lists) and what must run when it completes (the Avg
// division, the in-place reduce_scatter move). Storage is reserved up front
// and reused, so posting and completing make no allocation in steady state
// (apart from the scratch block of a posted in-place reduce_scatter; the
// copies of small sends are blocks recycled through a free list).
// Internal to backends/mpi.hpp.

#include <atomic>
#include <cstddef>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include <mpi.h>

#include <polycoll/detail/call.hpp>
#include <polycoll/detail/send_check.hpp>
#include <polycoll/kernels/reduce.hpp>

namespace polycoll::detail::mpi {

/// Work after a request completes: `fn(*this)` (nullptr: nothing).
struct Finish {
  void (*fn)(const Finish&) noexcept = nullptr;
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t count = 0;
  std::size_t divisor = 1;
  void run() const noexcept {
    if (fn) fn(*this);
  }
};

/// Finish of an Avg: divide `count` elements at dst by the world size.
template <DType D>
void divide_finish(const Finish& f) noexcept {
  kernels::divide(dtype_tag<D>{}, static_cast<typename dtype_tag<D>::type*>(f.dst), f.count, f.divisor);
}

/// Finish of an in-place reduce_scatter: the result is in a scratch block, move
/// it to the caller's block, then divide for Avg.
template <DType D, bool Divide>
void move_finish(const Finish& f) noexcept {
  using T = typename dtype_tag<D>::type;
  if (f.count != 0 && f.dst != f.src) std::memmove(f.dst, f.src, f.count * sizeof(T));
  if constexpr (Divide) kernels::divide(dtype_tag<D>{}, static_cast<T*>(f.dst), f.count, f.divisor);
}

struct Pending {
  CallDesc call;
  MPI_Datatype datatype;
  Finish finish;
  void* recv_buf = nullptr;  // a receive's buffer
  bool unmatched = false;     // a receive not yet matched by MPI_Improbe (no request yet)
  // Memory MPI writes until the request completes (a posted in-place
  // reduce_scatter's result block): freed with the entry once it is done.
  std::unique_ptr<std::byte[]> scratch;
  bool eager = false;  // scratch is a small send's copy (eager_bytes): recycled, not freed
};

class RequestPool {
 public:
  static constexpr std::size_t initial_capacity = 64;

  RequestPool() {
    requests_.reserve(initial_capacity);
    pending_.reserve(initial_capacity);
  }

  [[nodiscard]] bool empty() const noexcept { return requests_.empty(); }
  [[nodiscard]] std::size_t size() const noexcept { return requests_.size(); }

  /// Makes room for `more` entries (a submission leaves at most one) before
  /// it posts anything, so that the adds after its MPI call cannot throw: a
  /// request MPI holds must never be lost, with the scratch it writes freed
  /// under it. Throws std::bad_alloc (the submission then fails before posting).
  void reserve_more(std::size_t more) {
    detail::reserve_more(requests_, more);
    detail::reserve_more(pending_, more);
  }

  /// Adds a posted request; never allocates after reserve_more() made room.
  void add(MPI_Request r, const CallDesc& call, MPI_Datatype dt, Finish finish = {},
           std::unique_ptr<std::byte[]> scratch = {}) {
    requests_.push_back(r);
    pending_.push_back(Pending{call, dt, finish, nullptr, false, std::move(scratch)});
    busy_.store(true, std::memory_order_release);
  }

  /// Adds a posted send whose bytes MPI reads from `copy` (a block from
  /// take_eager(), returned to the free list when the entry is done).
  void add_send(MPI_Request r, const CallDesc& call, MPI_Datatype dt, std::unique_ptr<std::byte[]> copy) {
    const bool eager = copy != nullptr;
    add(r, call, dt, {}, std::move(copy));
    pending_.back().eager = eager;
  }

  /// A block of eager_bytes for a small send's copy: from the free list, or
  /// allocated (the first sends only). Throws std::bad_alloc.
  std::unique_ptr<std::byte[]> take_eager() {
    if (!eager_free_.empty()) {
      std::unique_ptr<std::byte[]> b = std::move(eager_free_.back());
      eager_free_.pop_back();
      return b;
    }
    eager_free_.reserve(eager_free_.capacity() + 1);  // room to give it back without allocating
    return std::unique_ptr<std::byte[]>(new std::byte[eager_bytes]);
  }

  /// Adds a receive that is matched later (see BasicMpi::try_match).
  void add_unmatched(const CallDesc& call, MPI_Datatype dt, void* buf) {
    requests_.push_back(MPI_REQUEST_NULL);
    pending_.push_back(Pending{call, dt, Finish{}, buf, true, {}});
    busy_.store(true, std::memory_order_release);
  }

  /// False only when sync() has nothing to do: set by every add, cleared by
  /// the owner (lock held) once the pool is empty and no error is deferred.
  /// Read without the lock by sync()'s fast path: a thread sees its own adds
  /// (program order); work other threads post concurrently is not awaited,
  /// as the order of concurrent submissions is unspecified.
  [[nodiscard]] bool busy() const noexcept { return busy_.load(std::memory_order_acquire); }
  void mark_idle() noexcept { busy_.store(false, std::memory_order_release); }

  Pending& pending(std::size_t i) noexcept { return pending_[i]; }
  const Pending& pending(std::size_t i) const noexcept { return pending_[i]; }
  MPI_Request& request(std::size_t i) noexcept { return requests_[i]; }

  /// Drops every entry that is done: its request completed (MPI_REQUEST_NULL)
  /// and it is not a receive still waiting to be matched.
  void compact() noexcept {
    std::size_t j = 0;
    for (std::size_t i = 0; i < requests_.size(); ++i) {
      if (requests_[i] != MPI_REQUEST_NULL || pending_[i].unmatched) {
        requests_[j] = requests_[i];
        if (j != i) pending_[j] = std::move(pending_[i]);
        ++j;
      } else if (pending_[i].eager && pending_[i].scratch && eager_free_.size() < eager_free_.capacity()) {
        eager_free_.push_back(std::move(pending_[i].scratch));  // within capacity: no allocation, no throw
      }
    }
    requests_.resize(j);
    pending_.resize(j);
  }

  void clear() noexcept {
    requests_.clear();
    pending_.clear();
  }

 private:
  std::vector<MPI_Request> requests_;
  std::vector<Pending> pending_;
  std::vector<std::unique_ptr<std::byte[]>> eager_free_;  // recycled small-send copies
  std::atomic<bool> busy_{false};
};

}  // namespace polycoll::detail::mpi
