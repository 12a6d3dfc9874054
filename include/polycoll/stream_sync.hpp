#pragma once
/// @file stream_sync.hpp
/// StreamSyncOps: event-based ordering between a backend's communication
/// stream and the user's compute streams (numr's seven operations). Handles
/// (events, streams) are passed as std::uint64_t, like addresses.

#include <cstdint>

#include <polycoll/error.hpp>

namespace polycoll {

/// Implemented by backends that run on streams (Nccl); `as_stream_sync()`
/// returns nullptr on the others.
class StreamSyncOps {
 public:
  /// Creates an event usable with the other operations.
  [[nodiscard]] virtual Result<std::uint64_t> create_event() = 0;
  /// Destroys an event made by create_event.
  [[nodiscard]] virtual Status destroy_event(std::uint64_t event) = 0;
  /// Records `event` on the communicator's communication stream.
  [[nodiscard]] virtual Status record_on_comm_stream(std::uint64_t event) = 0;
  /// Records `event` on the user stream `stream`.
  [[nodiscard]] virtual Status record_on_stream(std::uint64_t event, std::uint64_t stream) = 0;
  /// Makes later communication wait until `event` has completed.
  [[nodiscard]] virtual Status comm_stream_wait_event(std::uint64_t event) = 0;
  /// Makes later work on the user stream `stream` wait until `event` has completed.
  [[nodiscard]] virtual Status stream_wait_event(std::uint64_t stream, std::uint64_t event) = 0;
  /// Blocks the host until the communication stream is idle.
  [[nodiscard]] virtual Status sync_comm_stream() = 0;

 protected:
  /// Only backends make these.
  StreamSyncOps() = default;
  /// Interface only: no state to copy.
  StreamSyncOps(const StreamSyncOps&) = default;
  /// Interface only: no state to copy.
  StreamSyncOps& operator=(const StreamSyncOps&) = default;
  /// Protected and non-virtual: never deleted through this interface.
  ~StreamSyncOps() = default;
};

}  // namespace polycoll
