#pragma once
// The Nccl backend's one check helper: an ncclResult_t or cudaError_t becomes
// an Errc and a text "ncclAllReduce: ncclInvalidUsage: invalid usage (...);
// last NCCL error: <ncclGetLastError>" or "cudaStreamCreateWithFlags:
// cudaErrorNoDevice: no CUDA-capable device is detected". Internal to
// backends/nccl.hpp.

#include <cstdint>
#include <string>
#include <string_view>

#include <cuda_runtime.h>
#include <nccl.h>

#include <polycoll/detail/text.hpp>
#include <polycoll/error.hpp>

namespace polycoll::detail::nccl {

/// The enumerator's name ("ncclInvalidUsage"), for the codes NCCL 2.28 has.
inline std::string_view result_name(ncclResult_t r) noexcept {
  constexpr std::string_view names[] = {"ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError",
                                        "ncclInternalError",   "ncclInvalidArgument",    "ncclInvalidUsage",
                                        "ncclRemoteError",     "ncclInProgress"};
  const auto i = static_cast<std::size_t>(r);
  return i < sizeof(names) / sizeof(names[0]) ? names[i] : std::string_view("ncclResult_t(unknown)");
}

/// "fn: ncclInvalidUsage: <ncclGetErrorString>; last NCCL error: <ncclGetLastError>"
inline std::string nccl_text(ncclResult_t r, std::string_view fn, ncclComm_t comm = nullptr) {
  std::string s = cat(fn, ": ", result_name(r), ": ");
  const char* text = ncclGetErrorString(r);
  s += text ? text : "(no text)";
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') {
    s += "; last NCCL error: ";
    s += last;
  }
  return s;
}

/// "fn: cudaErrorInvalidValue: invalid argument". Also clears CUDA's last
/// (non-sticky) error so that it does not surface in the user's next check.
inline std::string cuda_text(cudaError_t e, std::string_view fn) {
  (void)cudaGetLastError();
  const char* n = cudaGetErrorName(e);
  const char* t = cudaGetErrorString(e);
  return cat(fn, ": ", n ? n : "cudaError", ": ", t ? t : "(no text)");
}

/// The polycoll code for an NCCL result.
inline Errc errc_of(ncclResult_t r) noexcept {
  switch (r) {
    case ncclInvalidArgument: return Errc::invalid_argument;
    default: return Errc::backend_failure;
  }
}

/// The polycoll code for a CUDA error.
inline Errc errc_of(cudaError_t e) noexcept {
  switch (e) {
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidResourceHandle: return Errc::invalid_argument;
    default: return Errc::backend_failure;
  }
}

/// "0x7f3a12000000": handles and addresses in messages.
inline std::string hex(std::uint64_t v) {
  constexpr char digits[] = "0123456789abcdef";
  std::string s = "0x";
  bool started = false;
  for (int shift = 60; shift >= 0; shift -= 4) {
    const auto d = static_cast<unsigned>((v >> shift) & 0xF);
    if (d != 0 || started || shift == 0) {
      s += digits[d];
      started = true;
    }
  }
  return s;
}

}  // namespace polycoll::detail::nccl
