#pragma once
/// @file log.hpp
/// A pluggable sink for what polycoll cannot return as an Error (mostly the
/// destructors' drop contract). The default sink writes one line to stderr.

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

namespace polycoll {

/// Severity of a log record.
enum class LogLevel : std::uint8_t { debug, info, warning, error };

/// Receives every record; must not throw and may be called from any thread.
using LogSink = void (*)(LogLevel, std::string_view message) noexcept;

namespace detail {
inline void stderr_sink(LogLevel level, std::string_view message) noexcept {
  constexpr const char* names[] = {"debug", "info", "warning", "error"};
  std::fprintf(stderr, "polycoll %s: %.*s\n", names[static_cast<int>(level)], static_cast<int>(message.size()),
               message.data());
}
struct LogState {
  std::mutex mutex;
  LogSink sink = &stderr_sink;
};
inline LogState& log_state() noexcept {
  static LogState state;
  return state;
}
}  // namespace detail

/// Installs `sink` (nullptr restores the default) and returns the previous one.
inline LogSink set_log_sink(LogSink sink) noexcept {
  auto& s = detail::log_state();
  std::lock_guard lock(s.mutex);
  return std::exchange(s.sink, sink ? sink : &detail::stderr_sink);
}

/// Sends one record to the current sink. Records are serialized.
inline void log(LogLevel level, std::string_view message) noexcept {
  auto& s = detail::log_state();
  std::lock_guard lock(s.mutex);
  s.sink(level, message);
}

}  // namespace polycoll
