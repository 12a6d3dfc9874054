#pragma once
// Device plumbing of the Nccl backend: the current-device guard, the polling
// back-off, waiting out ncclInProgress, and the check that a buffer is memory
// a GPU can reach. Internal to backends/nccl.hpp.

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include <cuda_runtime.h>
#include <nccl.h>

#include <polycoll/backends/nccl/error.hpp>
#include <polycoll/detail/text.hpp>
#include <polycoll/detail/wait.hpp>

namespace polycoll::detail::nccl {

/// Makes `device` current for its lifetime and restores the caller's device.
/// CUDA's current device is per host thread, and user code owns it: every
/// polycoll entry point leaves it as it found it.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) noexcept {
    if (cudaGetDevice(&saved_) != cudaSuccess) {
      saved_ = -1;
      (void)cudaGetLastError();
    }
    if (saved_ != device) {
      status_ = cudaSetDevice(device);
      if (status_ != cudaSuccess) (void)cudaGetLastError();
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() {
    int now = -1;
    if (saved_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != saved_) (void)cudaSetDevice(saved_);
  }
  /// cudaSuccess, or why the device could not be made current.
  [[nodiscard]] cudaError_t status() const noexcept { return status_; }

 private:
  int saved_ = -1;
  cudaError_t status_ = cudaSuccess;
};

/// Polling back-off: a few hundred busy polls (a short collective finishes in
/// microseconds), then yields, then sleeps growing to 1 ms.
class Backoff {
 public:
  void pause() noexcept {
    ++n_;
    if (n_ < 256) {
      cpu_relax();
    } else if (n_ < 1024) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(sleep_);
      if (sleep_ < std::chrono::microseconds(1000)) sleep_ *= 2;
    }
  }

 private:
  unsigned n_ = 0;
  std::chrono::microseconds sleep_{20};
};

/// Outcome of waiting while a communicator reports ncclInProgress.
struct Settled {
  ncclResult_t result = ncclSuccess;  ///< the communicator's state (or the query's own failure)
  bool timed_out = false;             ///< still ncclInProgress at the deadline
};

/// Polls ncclCommGetAsyncError until `comm` leaves ncclInProgress or the
/// deadline passes (none: forever). Non-blocking communicators need this
/// after init, split, finalize, and any call that returned ncclInProgress.
inline Settled settle(ncclComm_t comm, const std::optional<Clock::time_point>& deadline) noexcept {
  Backoff backoff;
  for (;;) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return {r, false};
    if (state != ncclInProgress) return {state, false};
    if (deadline && Clock::now() >= *deadline) return {ncclInProgress, true};
    backoff.pause();
  }
}

/// Empty when `p` is memory a kernel on `device` can read: device memory of
/// that device, managed memory, or host memory registered with CUDA. Otherwise
/// why not. Pageable host memory would make the NCCL kernel fault and poison
/// the whole CUDA context, so it is refused before NCCL sees it.
inline std::optional<std::string> unreachable(const void* p, int device) {
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) return cuda_text(e, "cudaPointerGetAttributes");
  switch (a.type) {
    case cudaMemoryTypeDevice:
      if (a.device != device) {
        return cat("the buffer is memory of device ", a.device, " but the communicator's device is ", device);
      }
      return std::nullopt;
    case cudaMemoryTypeManaged:
    case cudaMemoryTypeHost:
      return std::nullopt;
    default:
      return std::string("the buffer is host memory unknown to CUDA (pageable); Nccl needs device memory "
                         "(cudaMalloc), managed memory or registered host memory");
  }
}

}  // namespace polycoll::detail::nccl
