#pragma once
// Options::on_error and POLYCOLL_ON_ERROR: the setting a communicator gets
// when it is made, the fatal line, and the factories' part. Internal; the
// rules are in docs/reliability.md ("Abort on error").

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include <polycoll/detail/text.hpp>
#include <polycoll/detail/linkage.hpp>
#include <polycoll/error.hpp>

namespace polycoll::detail {

/// The environment variable that switches OnError::abort on.
inline constexpr const char* on_error_variable = "POLYCOLL_ON_ERROR";

/// The text in front of every fatal line.
inline constexpr std::string_view fatal_prefix = "polycoll: fatal error (on_error=abort): ";

/// The setting of a communicator made now with `option`: abort when the
/// option or POLYCOLL_ON_ERROR=abort says so. Like POLYCOLL_CHECK, the
/// environment switches it on for the communicators made after it is set, and
/// never off ("return" leaves the option as it is).
inline OnError on_error_from(OnError option) noexcept {
  if (option == OnError::abort) return OnError::abort;
  const char* v = std::getenv(on_error_variable);
  return v != nullptr && std::string_view(v) == "abort" ? OnError::abort : OnError::return_error;
}

/// POLYCOLL_ON_ERROR's value when it is set to something other than
/// "abort", "return" or nothing; nullptr otherwise.
inline const char* unrecognised_on_error() noexcept {
  const char* v = std::getenv(on_error_variable);
  if (v == nullptr) return nullptr;
  const std::string_view s(v);
  return s.empty() || s == "abort" || s == "return" ? nullptr : v;
}

/// A factory's first check: an unrecognised POLYCOLL_ON_ERROR fails it with
/// Errc::invalid_argument, since a misspelt "abort" silently returning errors
/// would defeat its purpose. `what` names the factory and backend.
Status check_on_error_environment(std::string_view what);

/// Writes "polycoll: fatal error (on_error=abort): <message>" to stderr as
/// one line (newlines in the message become spaces) with one write, so that
/// ranks sharing a terminal do not interleave within it.
void print_fatal(std::string_view message) noexcept;

/// Prints `e` and ends the process with SIGABRT: the last step of every
/// backend's abort, and the whole of it where there is no peer to stop.
[[noreturn]] void die(const Error& e) noexcept;

/// A factory's result under `on_error`: a failure ends the program through
/// `stop(error)` ([[noreturn]]; die() where there is no communicator to
/// abort), otherwise the result is returned as it is.
template <class T, class Stop>
Result<T> factory_result(OnError on_error, Result<T>&& r, Stop&& stop) {
  if (!r && on_error == OnError::abort) [[unlikely]] stop(r.error());
  return std::move(r);
}

template <class T>
Result<T> factory_result(OnError on_error, Result<T>&& r) {
  return factory_result(on_error, std::move(r), [](const Error& e) { die(e); });
}

// Defined in libpolycoll (src/core.cpp), or inline with POLYCOLL_HEADER_ONLY
// (detail/linkage.hpp).
#if defined(POLYCOLL_HEADER_ONLY) || defined(POLYCOLL_DETAIL_DEFINE_CORE)

POLYCOLL_DETAIL_LIB_INLINE Status check_on_error_environment(std::string_view what) {
  if (const char* v = unrecognised_on_error(); v != nullptr) [[unlikely]] {
    return fail(Errc::invalid_argument, cat(what, ": ", on_error_variable, "=", std::string_view(v),
                                            " is not recognised; use abort or return (or leave it unset)"));
  }
  return {};
}

POLYCOLL_DETAIL_LIB_INLINE void print_fatal(std::string_view message) noexcept {
  try {
    std::string line;
    line.reserve(fatal_prefix.size() + message.size() + 1);
    line.append(fatal_prefix.data(), fatal_prefix.size());
    for (char ch : message) line.push_back(ch == '\n' || ch == '\r' ? ' ' : ch);
    line.push_back('\n');
    std::fwrite(line.data(), 1, line.size(), stderr);
  } catch (...) {
    // No memory for the line: the pieces, unedited.
    std::fprintf(stderr, "%.*s%.*s\n", static_cast<int>(fatal_prefix.size()), fatal_prefix.data(),
                 static_cast<int>(message.size()), message.data());
  }
  std::fflush(stderr);
}

[[noreturn]] POLYCOLL_DETAIL_LIB_INLINE void die(const Error& e) noexcept {
  print_fatal(e.message);
  std::abort();
}

#endif

}  // namespace polycoll::detail
