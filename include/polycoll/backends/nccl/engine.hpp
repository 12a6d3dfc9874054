#pragma once
// The state of one Nccl communicator: the ncclComm_t, its own non-blocking
// CUDA stream, the submission mutex, the queued send/recv, the pending-call
// list, the timeout/abort logic, the bounded teardown and the StreamSyncOps.
// polycoll::Nccl (backends/nccl.hpp) holds one behind a unique_ptr, so moves
// are cheap and the mutex and the StreamSyncOps pointer stay put. Internal.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include <polycoll/backends/nccl/device.hpp>
#include <polycoll/backends/nccl/error.hpp>
#include <polycoll/communicator.hpp>
#include <polycoll/detail/call.hpp>
#include <polycoll/detail/text.hpp>
#include <polycoll/detail/wait.hpp>
#include <polycoll/log.hpp>
#include <polycoll/stream_sync.hpp>

namespace polycoll::detail::nccl {

inline constexpr std::string_view backend = "nccl";

/// The configuration of every communicator polycoll creates: non-blocking, so
/// that init, split, finalize and stuck operations can be bounded and aborted.
inline ncclConfig_t nonblocking_config() noexcept {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = 0;
  c.commName = "polycoll";
  return c;
}

/// A send or receive waiting for the next group launch.
struct P2p {
  bool is_send = true;
  void* ptr = nullptr;
  std::size_t count = 0;  // in NCCL elements
  ncclDataType_t type = ncclUint8;
  int peer = 0;
};

/// A buffer argument to check before NCCL sees it.
struct Arg {
  const void* ptr;
  const char* what;
};

/// One communicator. Not movable (the mutex and the StreamSyncOps address).
class Engine final : public StreamSyncOps {
 public:
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  ~Engine() { release(); }

  /// Wraps an initialised `comm` on `device`: creates the communication
  /// stream, the sync event and a small device scratch buffer. On failure
  /// the communicator is aborted and the error names `what`.
  [[nodiscard]] static Result<std::unique_ptr<Engine>> adopt(ncclComm_t comm, int device, const Options& options,
                                                             std::string_view what) {
    std::unique_ptr<Engine> e;
    try {
      e.reset(new Engine(device, options));
    } catch (const std::bad_alloc&) {
      (void)ncclCommAbort(comm);
      return fail(Errc::backend_failure, cat(what, " [nccl]: out of memory"));
    }
    DeviceGuard guard(device);
    auto bad_cuda = [&](cudaError_t err, std::string_view fn) {
      const std::string text = cuda_text(err, fn);
      e->comm_ = nullptr;  // aborted here; release() frees the rest
      (void)ncclCommAbort(comm);
      return fail(errc_of(err), cat(what, " [nccl]: ", text), static_cast<int>(err));
    };
    if (guard.status() != cudaSuccess) return bad_cuda(guard.status(), "cudaSetDevice");
    int n = 0, r = 0;
    ncclResult_t q = ncclCommCount(comm, &n);
    if (q == ncclSuccess) q = ncclCommUserRank(comm, &r);
    if (q != ncclSuccess) {
      const std::string text = nccl_text(q, "ncclCommCount/ncclCommUserRank", comm);
      (void)ncclCommAbort(comm);
      return fail(errc_of(q), cat(what, " [nccl]: ", text), static_cast<int>(q));
    }
    e->comm_ = comm;
    e->size_ = static_cast<std::size_t>(n);
    e->rank_ = static_cast<std::size_t>(r);
    if (auto err = cudaStreamCreateWithFlags(&e->stream_, cudaStreamNonBlocking); err != cudaSuccess)
      return bad_cuda(err, "cudaStreamCreateWithFlags");
    if (auto err = cudaEventCreateWithFlags(&e->done_, cudaEventDisableTiming); err != cudaSuccess)
      return bad_cuda(err, "cudaEventCreateWithFlags");
    // Scratch: [0, 64) barrier word, split's own (color, key) or this rank's
    // consistency-check fingerprint (48 bytes); [64, 64 + 48n) split's gather
    // (8 bytes a rank) or the fingerprints' (48); then all_reduce_value's
    // element (value_bytes, its own so that no other user of the scratch can
    // overwrite it while it is in flight). Stream-ordered, so freeing it never
    // synchronises the whole device.
    const std::size_t bytes = e->value_offset() + value_bytes;
    cudaError_t err = cudaMallocAsync(&e->scratch_, bytes, e->stream_);
    if (err == cudaSuccess) {
      e->scratch_async_ = true;
    } else {
      (void)cudaGetLastError();  // no memory pools (some virtualised GPUs): plain cudaMalloc
      e->scratch_ = nullptr;
      err = cudaMalloc(&e->scratch_, bytes);
      if (err != cudaSuccess) return bad_cuda(err, "cudaMalloc");
    }
    if (err = cudaMemsetAsync(e->scratch_, 0, bytes, e->stream_); err != cudaSuccess)
      return bad_cuda(err, "cudaMemsetAsync");
    return e;
  }

  [[nodiscard]] std::size_t rank() const noexcept { return rank_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }
  [[nodiscard]] ncclComm_t native() const noexcept { return comm_; }
  [[nodiscard]] const Options& options() const noexcept { return options_; }
  [[nodiscard]] std::size_t pending() const {
    std::lock_guard g(mutex_);
    return pending_.size() + unnamed_;
  }

  /// The Error of call `c` on this rank.
  [[nodiscard]] Error error(Errc code, const CallDesc& c, std::string_view what, int native = 0) const {
    return call_error(code, c, rank_, size_, backend, what, native);
  }

  // ------------------------------------------------------------ submission

  /// Launches one collective: checks the buffers, takes the submission lock,
  /// makes the device current, calls `launch(comm, stream)` (an NCCL call
  /// named `fn`) and settles a non-blocking ncclInProgress. count 0 launches
  /// nothing (NCCL would not either).
  template <class Launch>
  [[nodiscard]] Status submit(const CallDesc& call, std::initializer_list<Arg> args, std::string_view fn,
                              Launch&& launch) {
    if (call.count == 0 && !check_) {
      std::lock_guard g(mutex_);
      return live(call);
    }
    for (const Arg& a : args) {
      if (a.ptr == nullptr) continue;  // an empty buffer (the front end rejects null with a count)
      if (auto why = unreachable(a.ptr, device_)) {
        return tl::unexpected(error(Errc::invalid_argument, call, cat(a.what, ": ", *why)));
      }
    }
    std::unique_lock g(mutex_);
    if (auto s = live(call); !s) return s;
    DeviceGuard guard(device_);
    if (guard.status() != cudaSuccess) return cuda_error(call, guard.status(), "cudaSetDevice");
    CallDesc c = call;
    c.seq = ++seq_;
    if (auto s = check(c); !s) return s;
    if (call.count == 0) return {};  // checked (a peer may have called with another count); nothing to launch
    if (auto s = settle_call(c, launch(comm_, stream_), fn); !s) return s;
    remember(c);
    return {};
  }

  /// Queues a send or receive; the queue is launched as one ncclGroupStart/End
  /// group by the next sync(), barrier(), split(), record_on_comm_stream() or
  /// sync_comm_stream(), so every rank's sends and receives progress together
  /// and the exchange pattern cannot deadlock.
  [[nodiscard]] Status post(const CallDesc& call, const P2p& p) {
    if (call.count == 0) {
      std::lock_guard g(mutex_);
      return live(call);
    }
    if (auto why = unreachable(p.ptr, device_)) {
      return tl::unexpected(error(Errc::invalid_argument, call, cat("buffer: ", *why)));
    }
    std::lock_guard g(mutex_);
    if (auto s = live(call); !s) return s;
    CallDesc c = call;
    c.seq = ++seq_;
    try {
      p2p_.push_back(p);
    } catch (const std::bad_alloc&) {
      return tl::unexpected(error(Errc::backend_failure, c, "out of memory queueing the operation"));
    }
    remember(c);
    return {};
  }

  // ------------------------------------------------------------ completion

  /// sync(): launches queued send/recv, then waits until everything submitted
  /// before it has run, bounded by op_timeout.
  [[nodiscard]] Status sync(const CallDesc& c) {
    std::unique_lock g(mutex_);
    return complete(c, g);
  }

  /// group_start(): one more open group.
  [[nodiscard]] Status group_start(const CallDesc& c) {
    std::lock_guard g(mutex_);
    if (auto s = live(c); !s) return s;
    ++groups_;
    return {};
  }

  /// group_end(): closes a group; the outermost launches the queued
  /// send/recv as one ncclGroupStart/End now (completion is still sync()'s).
  [[nodiscard]] Status group_end(const CallDesc& c) {
    std::lock_guard g(mutex_);
    if (auto s = live(c); !s) return s;
    if (groups_ == 0) return tl::unexpected(error(Errc::invalid_argument, c, "no open group (group_end without group_start)"));
    if (--groups_ != 0) return {};
    return flush(c);
  }

  /// all_reduce_value(): the host element at `value` (`bytes` bytes, `n`
  /// NCCL elements of `type`) is copied to the scratch buffer's value slot,
  /// all-reduced there and, once complete() has waited for it and for all
  /// earlier work (bounded by op_timeout), copied back.
  [[nodiscard]] Status all_reduce_value(const CallDesc& call, void* value, std::size_t bytes, std::size_t n,
                                        ncclDataType_t type, ncclRedOp_t op) {
    // One value call at a time: they share the slot, and complete() releases
    // mutex_ while it waits, so without this a second thread's copy-in could
    // overwrite the slot before the first copied its result out.
    std::lock_guard one_value(value_mutex_);
    std::unique_lock g(mutex_);
    if (auto s = live(call); !s) return s;
    DeviceGuard guard(device_);
    if (guard.status() != cudaSuccess) return cuda_error(call, guard.status(), "cudaSetDevice");
    CallDesc c = call;
    c.seq = ++seq_;
    if (auto s = check(c); !s) return s;
    void* slot = static_cast<std::byte*>(scratch_) + value_offset();
    if (auto e = cudaMemcpyAsync(slot, value, bytes, cudaMemcpyHostToDevice, stream_); e != cudaSuccess)
      return cuda_error(c, e, "cudaMemcpyAsync (all_reduce_value)");
    if (auto s = settle_call(c, ncclAllReduce(slot, slot, n, type, op, comm_, stream_), "ncclAllReduce"); !s)
      return s;
    remember(c);
    if (auto s = complete(call, g); !s) return s;
    // complete() waited for this call and all earlier work. Work another
    // thread queued since (mutex_ is released while complete() waits) comes
    // before this copy on the stream, and the copy to pageable memory waits
    // for it, unbounded by op_timeout (docs/nccl.md).
    if (auto e = cudaMemcpyAsync(value, slot, bytes, cudaMemcpyDeviceToHost, stream_); e != cudaSuccess)
      return cuda_error(c, e, "cudaMemcpyAsync (all_reduce_value)");
    if (auto e = cudaStreamSynchronize(stream_); e != cudaSuccess)
      return cuda_error(c, e, "cudaStreamSynchronize (all_reduce_value)");
    return {};
  }

  /// barrier(): sync(), a one-word all-reduce on the scratch buffer, sync().
  [[nodiscard]] Status barrier(const CallDesc& call) {
    std::unique_lock g(mutex_);
    if (auto s = complete(call, g); !s) return s;
    {
      DeviceGuard guard(device_);
      CallDesc c = call;
      c.seq = ++seq_;
      if (auto s = check(c); !s) return s;
      const ncclResult_t r = ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_);
      if (auto s = settle_call(c, r, "ncclAllReduce (barrier)"); !s) return s;
      remember(c);
    }
    return complete(call, g);
  }

  /// split(): completes pending work, gathers every rank's (color, key) so
  /// that any uint32 values work (NCCL wants non-negative int colors), then
  /// ncclCommSplit with dense colors and (key, old rank) positions as keys.
  /// nullptr for no_color.
  [[nodiscard]] Result<std::unique_ptr<Engine>> split(const CallDesc& call, std::uint32_t color, std::uint32_t key) {
    std::unique_lock g(mutex_);
    if (auto s = complete(call, g); !s) return tl::unexpected(std::move(s.error()));
    DeviceGuard guard(device_);
    {
      CallDesc c = call;
      c.seq = ++seq_;
      if (auto s = check(c); !s) return tl::unexpected(std::move(s.error()));
    }
    auto* base = static_cast<std::byte*>(scratch_);
    const std::uint32_t mine[2] = {color, key};
    if (auto e = cudaMemcpyAsync(base, mine, sizeof mine, cudaMemcpyHostToDevice, stream_); e != cudaSuccess)
      return tl::unexpected(cuda_error(call, e, "cudaMemcpyAsync").error());
    {
      CallDesc c = call;
      c.seq = ++seq_;
      const ncclResult_t r = ncclAllGather(base, base + 64, 2, ncclUint32, comm_, stream_);
      if (auto s = settle_call(c, r, "ncclAllGather (split)"); !s) return tl::unexpected(std::move(s.error()));
      remember(c);
    }
    if (auto s = complete(call, g); !s) return tl::unexpected(std::move(s.error()));
    std::vector<std::uint32_t> all;
    try {
      all.resize(2 * size_);
    } catch (const std::bad_alloc&) {
      return tl::unexpected(error(Errc::backend_failure, call, "out of memory"));
    }
    // The stream is idle now (complete() waited), so this copy cannot hang.
    if (auto e = cudaMemcpyAsync(all.data(), base + 64, 8 * size_, cudaMemcpyDeviceToHost, stream_); e != cudaSuccess)
      return tl::unexpected(cuda_error(call, e, "cudaMemcpyAsync").error());
    if (auto e = cudaStreamSynchronize(stream_); e != cudaSuccess)
      return tl::unexpected(cuda_error(call, e, "cudaStreamSynchronize").error());

    int dense_color = NCCL_SPLIT_NOCOLOR;
    int dense_key = 0;
    if (color != no_color) {
      std::vector<std::uint32_t> colors;
      for (std::size_t q = 0; q < size_; ++q) {
        if (all[2 * q] != no_color) colors.push_back(all[2 * q]);
      }
      std::sort(colors.begin(), colors.end());
      colors.erase(std::unique(colors.begin(), colors.end()), colors.end());
      dense_color = static_cast<int>(std::lower_bound(colors.begin(), colors.end(), color) - colors.begin());
      for (std::size_t q = 0; q < size_; ++q) {
        const std::uint32_t kq = all[2 * q + 1];
        if (all[2 * q] == color && (kq < key || (kq == key && q < rank_))) ++dense_key;
      }
    }

    // NCCL writes the child handle from its own thread when the split job
    // ends; the slot lives on the heap so that a timed-out split (whose job we
    // stop waiting for) cannot write into a dead stack frame.
    auto slot = std::make_unique<ncclComm_t>(nullptr);
    ncclConfig_t config = nonblocking_config();
    const auto deadline = deadline_after(options_.op_timeout);
    const ncclResult_t r = ncclCommSplit(comm_, dense_color, dense_key, slot.get(), &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      return tl::unexpected(error(errc_of(r), call, nccl_text(r, "ncclCommSplit", comm_), static_cast<int>(r)));
    }
    const Settled parent = nccl::settle(comm_, deadline);
    if (parent.timed_out) {
      (void)slot.release();  // the split job may still write it; a few bytes leak on this path only
      return tl::unexpected(
          kill(Errc::timeout, call,
               cat("ncclCommSplit did not complete within op_timeout (", options_.op_timeout->count(),
                   " ms); the communicator was aborted"))
              .error());
    }
    if (parent.result != ncclSuccess) {
      return tl::unexpected(
          kill(errc_of(parent.result), call, nccl_text(parent.result, "ncclCommSplit", comm_)).error());
    }
    ncclComm_t child = std::atomic_ref<ncclComm_t>(*slot).load(std::memory_order_acquire);
    if (dense_color == NCCL_SPLIT_NOCOLOR) {
      if (child != nullptr) (void)ncclCommAbort(child);
      return std::unique_ptr<Engine>{};
    }
    if (child == nullptr) {
      return tl::unexpected(error(Errc::backend_failure, call, "ncclCommSplit returned no communicator"));
    }
    const Settled made = nccl::settle(child, deadline);
    if (made.timed_out || made.result != ncclSuccess) {
      const std::string text = made.timed_out ? std::string("the new communicator did not initialise within op_timeout")
                                              : nccl_text(made.result, "ncclCommSplit (child)", child);
      (void)ncclCommAbort(child);
      return tl::unexpected(error(made.timed_out ? Errc::timeout : errc_of(made.result), call, text));
    }
    g.unlock();
    auto e = adopt(child, device_, options_, "split()");
    if (!e) return tl::unexpected(error(e.error().code, call, e.error().message, e.error().native));
    return std::move(*e);
  }

  // ------------------------------------------------------------ StreamSyncOps

  [[nodiscard]] Result<std::uint64_t> create_event() override {
    DeviceGuard guard(device_);
    cudaEvent_t ev = nullptr;
    if (auto e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming); e != cudaSuccess) {
      return tl::unexpected(op_error(errc_of(e), "create_event()", cuda_text(e, "cudaEventCreateWithFlags"), e));
    }
    return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(ev));
  }

  [[nodiscard]] Status destroy_event(std::uint64_t event) override {
    const std::string call = cat("destroy_event(event=", hex(event), ')');
    if (event == 0) return tl::unexpected(op_error(Errc::invalid_argument, call, "null event"));
    DeviceGuard guard(device_);
    if (auto e = cudaEventDestroy(as_event(event)); e != cudaSuccess)
      return tl::unexpected(op_error(errc_of(e), call, cuda_text(e, "cudaEventDestroy"), e));
    return {};
  }

  [[nodiscard]] Status record_on_comm_stream(std::uint64_t event) override {
    const std::string call = cat("record_on_comm_stream(event=", hex(event), ')');
    if (event == 0) return tl::unexpected(op_error(Errc::invalid_argument, call, "null event"));
    std::lock_guard g(mutex_);
    const auto c = CallDesc::plain(Call::sync);
    if (auto s = live(c); !s) return tl::unexpected(op_error(Errc::aborted, call, s.error().message));
    // Queued send/recv are submitted work: launch them so that the event covers them.
    if (auto s = flush(c); !s) return s;
    DeviceGuard guard(device_);
    if (auto e = cudaEventRecord(as_event(event), stream_); e != cudaSuccess)
      return tl::unexpected(op_error(errc_of(e), call, cuda_text(e, "cudaEventRecord"), e));
    return {};
  }

  [[nodiscard]] Status record_on_stream(std::uint64_t event, std::uint64_t stream) override {
    const std::string call = cat("record_on_stream(event=", hex(event), ", stream=", hex(stream), ')');
    if (event == 0) return tl::unexpected(op_error(Errc::invalid_argument, call, "null event"));
    DeviceGuard guard(device_);
    if (auto e = cudaEventRecord(as_event(event), as_stream(stream)); e != cudaSuccess)
      return tl::unexpected(op_error(errc_of(e), call, cuda_text(e, "cudaEventRecord"), e));
    return {};
  }

  [[nodiscard]] Status comm_stream_wait_event(std::uint64_t event) override {
    const std::string call = cat("comm_stream_wait_event(event=", hex(event), ')');
    if (event == 0) return tl::unexpected(op_error(Errc::invalid_argument, call, "null event"));
    std::lock_guard g(mutex_);
    if (auto s = live(CallDesc::plain(Call::sync)); !s)
      return tl::unexpected(op_error(Errc::aborted, call, s.error().message));
    DeviceGuard guard(device_);
    if (auto e = cudaStreamWaitEvent(stream_, as_event(event), 0); e != cudaSuccess)
      return tl::unexpected(op_error(errc_of(e), call, cuda_text(e, "cudaStreamWaitEvent"), e));
    return {};
  }

  [[nodiscard]] Status stream_wait_event(std::uint64_t stream, std::uint64_t event) override {
    const std::string call = cat("stream_wait_event(stream=", hex(stream), ", event=", hex(event), ')');
    if (event == 0) return tl::unexpected(op_error(Errc::invalid_argument, call, "null event"));
    DeviceGuard guard(device_);
    if (auto e = cudaStreamWaitEvent(as_stream(stream), as_event(event), 0); e != cudaSuccess)
      return tl::unexpected(op_error(errc_of(e), call, cuda_text(e, "cudaStreamWaitEvent"), e));
    return {};
  }

  /// Same as sync(): queued send/recv are launched, then the stream drains.
  [[nodiscard]] Status sync_comm_stream() override { return sync(CallDesc::plain(Call::sync)); }

 private:
  Engine(int device, const Options& options)
      : device_(device), options_(options), check_(options.check_consistency || check_from_environment()) {
    pending_.reserve(max_named);
    p2p_.reserve(16);
    flight_ = FlightRecorder::make(options.flight_record_size);
  }

  static cudaEvent_t as_event(std::uint64_t h) noexcept {
    return reinterpret_cast<cudaEvent_t>(static_cast<std::uintptr_t>(h));
  }
  static cudaStream_t as_stream(std::uint64_t h) noexcept {
    return reinterpret_cast<cudaStream_t>(static_cast<std::uintptr_t>(h));
  }

  Error op_error(Errc code, std::string_view call, std::string_view what, int native = 0) const {
    return Error{code, cat(call, where(rank_, size_, backend), ": ", what), native};
  }
  Error op_error(Errc code, std::string_view call, std::string_view what, cudaError_t e) const {
    return op_error(code, call, what, static_cast<int>(e));
  }

  Status cuda_error(const CallDesc& c, cudaError_t e, std::string_view fn) const {
    return tl::unexpected(error(errc_of(e), c, cuda_text(e, fn), static_cast<int>(e)));
  }

  // Errc::aborted once the communicator has been aborted (timeout, NCCL
  // asynchronous error): NCCL cannot run anything on it any more.
  Status live(const CallDesc& c) const {
    if (comm_ == nullptr) {
      return tl::unexpected(
          error(Errc::aborted, c, cat("the communicator was aborted earlier: ", dead_.empty() ? "unknown" : dead_)));
    }
    return {};
  }

  // How long a launch that NCCL keeps in progress may take: op_timeout for
  // calls, drop_timeout for the destructor (which must never hang).
  struct Bound {
    std::optional<Clock::time_point> deadline;
    std::string_view name;
    long long ms = 0;
  };
  Bound op_bound() const {
    return {deadline_after(options_.op_timeout), "op_timeout", options_.op_timeout ? options_.op_timeout->count() : 0};
  }

  // After an NCCL call on the communicator (lock held): settles ncclInProgress
  // (bounded by op_timeout) and turns failures into Errors; a failure that
  // left the communicator in error aborts it.
  Status settle_call(const CallDesc& c, ncclResult_t r, std::string_view fn) {
    return settle_call(c, r, fn, op_bound());
  }
  Status settle_call(const CallDesc& c, ncclResult_t r, std::string_view fn, const Bound& bound) {
    if (r == ncclInProgress) {
      const Settled s = nccl::settle(comm_, bound.deadline);
      if (s.timed_out) {
        return kill(Errc::timeout, c,
                    cat(fn, " still in progress after ", bound.name, " (", bound.ms,
                        " ms): a peer did not join; pending: ", pending_text(), "; the communicator was aborted"));
      }
      r = s.result;
    }
    if (r == ncclSuccess) return {};
    const std::string text = nccl_text(r, fn, comm_);
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm_, &state);
    if (q != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
      return kill(errc_of(r), c, cat(text, "; the communicator is in error and was aborted"), r);
    }
    return tl::unexpected(error(errc_of(r), c, text, static_cast<int>(r)));
  }

  // Aborts the communicator (lock held) and returns the Error of `c`.
  Status kill(Errc code, const CallDesc& c, std::string_view what, ncclResult_t native = ncclSuccess) {
    Error e = error(code, c, what, static_cast<int>(native));
    dead_ = e.message;
    abort_now();
    return tl::unexpected(std::move(e));
  }

  void abort_now() noexcept {
    if (comm_ == nullptr) return;
    DeviceGuard guard(device_);
    const ncclResult_t r = ncclCommAbort(comm_);
    if (r != ncclSuccess) {
      log(LogLevel::warning, cat("Nccl communicator (rank ", rank_, " of ", size_, ", device ", device_,
                                 "): ", nccl_text(r, "ncclCommAbort")));
    }
    comm_ = nullptr;
    p2p_.clear();
    pending_.clear();
    unnamed_ = 0;
  }

  // Launches the queued send/recv as one group (lock held).
  Status flush(const CallDesc& c) { return flush(c, op_bound()); }
  Status flush(const CallDesc& c, const Bound& bound) {
    if (p2p_.empty()) return {};
    DeviceGuard guard(device_);
    if (guard.status() != cudaSuccess) return cuda_error(c, guard.status(), "cudaSetDevice");
    if (const ncclResult_t r = ncclGroupStart(); r != ncclSuccess) return settle_call(c, r, "ncclGroupStart");
    ncclResult_t first = ncclSuccess;
    std::string_view first_fn;
    for (const P2p& p : p2p_) {
      const ncclResult_t r = p.is_send ? ncclSend(p.ptr, p.count, p.type, p.peer, comm_, stream_)
                                       : ncclRecv(p.ptr, p.count, p.type, p.peer, comm_, stream_);
      if (r != ncclSuccess && r != ncclInProgress && first == ncclSuccess) {
        first = r;
        first_fn = p.is_send ? "ncclSend" : "ncclRecv";
      }
    }
    const ncclResult_t end = ncclGroupEnd();
    p2p_.clear();
    if (first != ncclSuccess) return settle_call(c, first, first_fn, bound);
    return settle_call(c, end, "ncclGroupEnd (send/recv)", bound);
  }

  // Launches queued send/recv, then waits for everything submitted so far
  // (lock held; released between polls so that other threads keep
  // submitting). Expiry of op_timeout or an asynchronous NCCL error aborts.
  Status complete(const CallDesc& c, std::unique_lock<std::mutex>& g) {
    if (auto s = live(c); !s) return s;
    if (auto s = flush(c); !s) return s;
    return drain(c, &g);
  }

  // Waits until everything on the stream so far has run, bounded by
  // op_timeout (lock held; with `g`, released between polls). Queued
  // send/recv stay queued.
  Status drain(const CallDesc& c, std::unique_lock<std::mutex>* g) {
    DeviceGuard guard(device_);
    const std::uint64_t upto = seq_;
    if (auto e = cudaEventRecord(done_, stream_); e != cudaSuccess) return cuda_error(c, e, "cudaEventRecord");
    const auto deadline = deadline_after(options_.op_timeout);
    Backoff backoff;
    for (;;) {
      const cudaError_t e = cudaEventQuery(done_);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) {
        const std::string text = cuda_text(e, "cudaEventQuery");
        return kill(errc_of(e), c, cat(text, "; pending: ", pending_text(), "; the communicator was aborted"));
      }
      ncclResult_t state = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(comm_, &state);
      if (q != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
        const ncclResult_t bad = q != ncclSuccess ? q : state;
        return kill(errc_of(bad), c,
                    cat(nccl_text(bad, "ncclCommGetAsyncError", comm_), "; pending: ", pending_text(),
                        "; the communicator was aborted"),
                    bad);
      }
      if (deadline && Clock::now() >= *deadline) {
        return kill(Errc::timeout, c,
                    cat("timed out after ", options_.op_timeout->count(), " ms; pending: ", pending_text(),
                        "; the communicator was aborted (ncclCommAbort), later calls return Errc::aborted"));
      }
      if (g) g->unlock();
      backoff.pause();
      if (g) g->lock();
      if (auto s = live(c); !s) return s;
    }
    retire(upto);
    return {};
  }

  // The consistency check (Options::check_consistency or POLYCOLL_CHECK=1),
  // before collective `c` (numbered, lock held, device current): every rank
  // all-gathers its fingerprint (call, count, dtype, op, root and the
  // collective's own sequence number: p2p does not count, so ranks that send
  // different amounts still agree) through the scratch buffer, waits for it
  // (bounded by op_timeout; the lock stays held so that no other thread's call
  // lands between the check and its collective) and compares on the host. A
  // mismatch is Errc::mismatch on every rank with nothing launched, so the
  // ranks stay in step. Queued send/recv are not launched. It makes every
  // collective wait for the stream: a mode for finding bugs, not for speed.
  Status check(const CallDesc& c) {
    if (!check_) [[likely]] return {};
    CallDesc fp = c;
    fp.seq = ++coll_seq_;
    // Pinned, so that both copies are truly asynchronous (a pageable one may
    // block the host until the stream reaches it: unbounded behind a
    // collective a peer never joins). Rank q's fingerprint at words * q, this
    // rank's own after the last. Made at the first check, freed by release().
    if (check_pinned_ == nullptr) {
      void* p = nullptr;
      if (auto e = cudaMallocHost(&p, sizeof(Fingerprint) * (size_ + 1)); e != cudaSuccess)
        return cuda_error(c, e, "cudaMallocHost (consistency check)");
      check_pinned_ = static_cast<std::uint64_t*>(p);
    }
    std::uint64_t* own = check_pinned_ + words * size_;
    const Fingerprint mine = fingerprint(fp);
    std::copy(mine.begin(), mine.end(), own);  // the previous check's copies have run (it drained)
    auto* base = static_cast<std::byte*>(scratch_);
    if (auto e = cudaMemcpyAsync(base, own, sizeof mine, cudaMemcpyHostToDevice, stream_); e != cudaSuccess)
      return cuda_error(c, e, "cudaMemcpyAsync (consistency check)");
    const ncclResult_t r = ncclAllGather(base, base + 64, sizeof mine, ncclUint8, comm_, stream_);
    if (auto s = settle_call(c, r, "ncclAllGather (consistency check)"); !s) return s;
    remember(c);  // named in the timeout if a peer never joins
    if (auto e = cudaMemcpyAsync(check_pinned_, base + 64, sizeof mine * size_, cudaMemcpyDeviceToHost, stream_);
        e != cudaSuccess)
      return cuda_error(c, e, "cudaMemcpyAsync (consistency check)");
    if (auto s = drain(c, nullptr); !s) return s;
    const std::string diff = fingerprint_diff(check_pinned_, size_, fp);
    if (diff.empty()) return {};
    return tl::unexpected(error(Errc::mismatch, fp, cat("consistency check failed: ", diff)));
  }

  static constexpr std::size_t max_named = 64;

  void remember(const CallDesc& c) noexcept {
    if (pending_.size() < max_named) {
      pending_.push_back(c);  // capacity reserved: no allocation
    } else {
      ++unnamed_;
    }
  }
  void retire(std::uint64_t upto) noexcept {
    if (upto == seq_) {
      pending_.clear();
      unnamed_ = 0;
      return;
    }
    std::erase_if(pending_, [upto](const CallDesc& d) { return d.seq <= upto; });
  }
  std::string pending_text() const {
    std::string s;
    for (const CallDesc& d : pending_) {
      if (!s.empty()) s += ", ";
      s += describe(d);
    }
    if (unnamed_ != 0) s += cat(" and ", unnamed_, " more");
    return s.empty() ? std::string("none") : s;
  }

  // The drop contract: launch queued send/recv, wait at most drop_timeout for
  // the stream to drain and for ncclCommFinalize (non-blocking) to finish,
  // then ncclCommDestroy; on expiry or error log and ncclCommAbort. Never
  // throws.
  void release() noexcept {
    try {
      std::unique_lock g(mutex_);
      DeviceGuard guard(device_);
      if (comm_ != nullptr) {
        const auto deadline = Clock::now() + options_.drop_timeout;
        const std::string names = pending_text();
        std::string why;
        // Bounded by drop_timeout, not op_timeout (none by default): launching
        // the queued group waits for the peers' connection setup, which a peer
        // that never calls would make endless.
        if (auto s = flush(CallDesc::plain(Call::sync), Bound{deadline, "drop_timeout", options_.drop_timeout.count()});
            !s)
          why = s.error().message;
        if (why.empty() && comm_ != nullptr) {
          if (auto e = cudaEventRecord(done_, stream_); e != cudaSuccess) why = cuda_text(e, "cudaEventRecord");
        }
        Backoff backoff;
        while (why.empty() && comm_ != nullptr) {
          const cudaError_t e = cudaEventQuery(done_);
          if (e == cudaSuccess) break;
          if (e != cudaErrorNotReady) {
            why = cuda_text(e, "cudaEventQuery");
            break;
          }
          ncclResult_t state = ncclSuccess;
          if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress) {
            why = nccl_text(state, "ncclCommGetAsyncError", comm_);
            break;
          }
          if (Clock::now() >= deadline) {
            why = cat("pending operations did not complete within drop_timeout (", options_.drop_timeout.count(),
                      " ms)");
            break;
          }
          backoff.pause();
        }
        if (why.empty() && comm_ != nullptr) {
          const ncclResult_t r = ncclCommFinalize(comm_);
          if (r != ncclSuccess && r != ncclInProgress) {
            why = nccl_text(r, "ncclCommFinalize", comm_);
          } else {
            const Settled s = nccl::settle(comm_, deadline);
            if (s.timed_out) {
              why = cat("ncclCommFinalize did not complete within drop_timeout (", options_.drop_timeout.count(),
                        " ms)");
            } else if (s.result != ncclSuccess) {
              why = nccl_text(s.result, "ncclCommFinalize", comm_);
            }
          }
        }
        if (comm_ != nullptr) {
          if (why.empty()) {
            if (const ncclResult_t r = ncclCommDestroy(comm_); r != ncclSuccess) {
              log(LogLevel::warning, cat("Nccl communicator (rank ", rank_, " of ", size_, ", device ", device_,
                                         "): ", nccl_text(r, "ncclCommDestroy")));
            }
            comm_ = nullptr;
          } else {
            log(LogLevel::warning,
                cat("Nccl communicator (rank ", rank_, " of ", size_, ", device ", device_, ") destroyed: ", why,
                    "; pending when destroyed: ", names, "; aborting it (ncclCommAbort)"));
            abort_now();
          }
        } else if (!why.empty()) {
          // The flush above already aborted it (kill): still the drop contract's record.
          log(LogLevel::warning, cat("Nccl communicator (rank ", rank_, " of ", size_, ", device ", device_,
                                     ") destroyed: ", why, "; pending when destroyed: ", names));
        }
      }
      if (done_ != nullptr) (void)cudaEventDestroy(done_);
      // After the stream drained or the communicator was aborted: no copy of
      // the check still targets it (cudaFreeHost synchronises the device).
      if (check_pinned_ != nullptr) (void)cudaFreeHost(check_pinned_);
      if (scratch_ != nullptr) {
        if (scratch_async_) {
          (void)cudaFreeAsync(scratch_, stream_);
        } else {
          (void)cudaFree(scratch_);
        }
      }
      if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
      (void)cudaGetLastError();
      done_ = nullptr;
      check_pinned_ = nullptr;
      scratch_ = nullptr;
      stream_ = nullptr;
    } catch (...) {
      // Only message formatting can throw (bad_alloc); the contract is to never throw.
    }
  }

  ncclComm_t comm_ = nullptr;  // null once aborted or destroyed
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;  // recorded by complete() on stream_
  // all_reduce_value's slot in the scratch buffer: one element of any dtype.
  static constexpr std::size_t value_bytes = 16;
  std::size_t value_offset() const noexcept { return 64 + sizeof(Fingerprint) * size_; }
  void* scratch_ = nullptr;
  bool scratch_async_ = false;
  int device_ = 0;
  std::size_t rank_ = 0;
  std::size_t size_ = 1;
  Options options_;
  mutable std::mutex mutex_;
  std::mutex value_mutex_;  // all_reduce_value's slot: one call at a time (taken before mutex_)
  std::uint64_t seq_ = 0;
  std::vector<CallDesc> pending_;  // submitted, not yet known complete (the first max_named)
  std::size_t unnamed_ = 0;        // beyond max_named
  std::vector<P2p> p2p_;           // queued for the next group launch
  std::size_t groups_ = 0;         // open group_start()s
  std::string dead_;               // why the communicator was aborted
  bool check_ = false;             // Options::check_consistency or POLYCOLL_CHECK=1
  std::uint64_t coll_seq_ = 0;     // collectives checked so far (the fingerprints' numbers)
  static constexpr std::size_t words = std::tuple_size_v<Fingerprint>;
  std::uint64_t* check_pinned_ = nullptr;  // pinned: every rank's fingerprint, then this rank's
  std::unique_ptr<FlightRecorder> flight_;  // this communicator's last calls (null: flight_record_size 0)

 public:
  /// The ring the front end records every call in.
  FlightRecorder* flight() const noexcept { return flight_.get(); }
};

}  // namespace polycoll::detail::nccl
