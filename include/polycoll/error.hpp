#pragma once
/// @file error.hpp
/// Error codes and the Result/Status types every fallible call returns.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <tl/expected.hpp>

namespace polycoll {

/// What went wrong, coarsely; the message says precisely.
enum class Errc : std::uint8_t {
  invalid_argument,  ///< the call was malformed (null address, bad root, span size, dtype/op pair)
  unsupported,       ///< the backend cannot do this (dtype, op or operation)
  backend_failure,   ///< the native library reported an error
  timeout,           ///< Options::op_timeout expired
  truncated,         ///< a message was larger than the posted receive
  mismatch,          ///< ranks disagreed about a call (consistency check, unmatched p2p)
  aborted,           ///< the communicator was aborted
  not_initialized,   ///< the native library was not initialised
};

/// Stable lower-case name of an Errc ("invalid_argument", ...).
[[nodiscard]] constexpr std::string_view to_string(Errc e) noexcept {
  switch (e) {
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::unsupported: return "unsupported";
    case Errc::backend_failure: return "backend_failure";
    case Errc::timeout: return "timeout";
    case Errc::truncated: return "truncated";
    case Errc::mismatch: return "mismatch";
    case Errc::aborted: return "aborted";
    case Errc::not_initialized: return "not_initialized";
  }
  return "unknown";
}

/// An error: a code, a message naming the call, its arguments, rank/world and
/// backend, and the native error code where there is one.
struct Error {
  /// What kind of failure.
  Errc code = Errc::backend_failure;
  /// The whole story: call, arguments, rank/world, backend, native error text.
  std::string message;
  /// The native library's error code (MPI, NCCL, CUDA), 0 when there is none.
  int native = 0;
};

/// What a communicator does with an Error one of its calls is about to
/// return (Options::on_error, or POLYCOLL_ON_ERROR=abort in the environment).
enum class OnError : std::uint8_t {
  return_error,  ///< return it (the default): the caller decides
  abort,         ///< print it as one line to stderr and stop every rank, like MPI_ERRORS_ARE_FATAL
};

/// A value or an Error.
template <class T>
using Result = tl::expected<T, Error>;

/// Success or an Error.
using Status = Result<void>;

/// Makes the error branch of a Result/Status: `return polycoll::fail(Errc::timeout, "...");`
[[nodiscard]] inline tl::unexpected<Error> fail(Errc code, std::string message, int native = 0) {
  return tl::unexpected<Error>(Error{code, std::move(message), native});
}

/// A successful Status.
[[nodiscard]] inline Status ok() noexcept { return {}; }

}  // namespace polycoll
