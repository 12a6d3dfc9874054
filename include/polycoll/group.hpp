#pragma once
/// @file group.hpp
/// Group<C>: the RAII form of `group_start()` / `group_end()`, as returned by
/// `comm.group()`. Everything submitted to the communicator while the group is
/// open is issued as one batch when it ends (ncclGroupStart/End on Nccl; the
/// other backends post point-to-point work non-blocking as it is submitted, so
/// a group there only marks the batch). End it with `end()` to see its Status;
/// a group still open when destroyed ends then and logs a failure.

#include <string>
#include <utility>

#include <polycoll/error.hpp>
#include <polycoll/log.hpp>

namespace polycoll {

/// An open group on a communicator of type C (a `Communicator<B>` or an `AnyCommunicator`).
template <class C>
class [[nodiscard]] Group {
 public:
  /// Opens a group on `comm` (calls `comm.group_start()`); a failure to open
  /// is kept and returned by end().
  explicit Group(C& comm) : comm_(&comm), started_(comm.group_start()) {}
  /// Takes over an open group; `other` is left ended.
  Group(Group&& other) noexcept
      : comm_(std::exchange(other.comm_, nullptr)), started_(std::move(other.started_)) {}
  Group& operator=(Group&&) = delete;
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  /// Ends the group if end() was not called; a failure is logged, never thrown.
  ~Group() {
    if (!comm_) return;
    Status s = end();
    if (!s) log(LogLevel::error, "group ended by its destructor failed: " + s.error().message);
  }

  /// True until end() is called.
  [[nodiscard]] bool open() const noexcept { return comm_ != nullptr; }

  /// Ends the group: issues the batch. Returns the error of opening it, of
  /// issuing it, or Errc::invalid_argument when called twice.
  [[nodiscard]] Status end() {
    if (!comm_) return fail(Errc::invalid_argument, "Group::end(): the group was already ended");
    C* c = std::exchange(comm_, nullptr);
    if (!started_) return started_;
    return c->group_end();
  }

 private:
  C* comm_;
  Status started_;
};

}  // namespace polycoll
