#pragma once
/// @file backends/noop.hpp
/// NoOp: a world of one rank. In-place collectives do nothing, all_gather and
/// reduce_scatter copy send to recv, send/recv to self match by tag at sync()
/// (a small send is copied when posted; probe sees the unmatched sends).
/// Useful as the serial build of a distributed code and as the reference for
/// the cost of the front end.

#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <polycoll/any_communicator.hpp>
#include <polycoll/communicator.hpp>
#include <polycoll/detail/send_check.hpp>
#include <polycoll/detail/on_error.hpp>
#include <polycoll/log.hpp>

namespace polycoll {

class NoOp;

template <DType D>
struct supports_dtype<NoOp, D> : std::true_type {};
template <DType D, ReduceOp Op>
struct supports_reduction<NoOp, D, Op> : std::bool_constant<is_valid_v<D, Op>> {};
/// NoOp has probe and wildcard receives (its one rank sends to itself).
template <>
struct supports_probe<NoOp> : std::true_type {};

/// The world-of-one backend.
class NoOp : public Communicator<NoOp> {
 public:
  /// The name in error messages and AnyCommunicator::backend_name().
  static constexpr std::string_view backend_name = "noop";
  /// A collective returns complete (its outputs valid, nothing of it left
  /// pending), so all_reduce_value needs no sync() after it.
  static constexpr bool collectives_complete_on_return = true;

  /// A communicator of one rank.
  NoOp() : NoOp(Options{}) {}
  /// A communicator of one rank with `options` (drop_timeout is moot: nothing
  /// waits). POLYCOLL_ON_ERROR=abort sets on_error; a constructor cannot fail,
  /// so an unrecognised value is logged (once per process) and ignored.
  explicit NoOp(Options options)
      : options_(with_environment(options)), flight_(detail::FlightRecorder::make(options_.flight_record_size)) {}
  /// Takes over `other`'s pending send/recv (`other` stays a usable world of one).
  /// Its flight record moves too: `other` records nothing more (also for the
  /// move assignment).
  NoOp(NoOp&& other) noexcept
      : Communicator<NoOp>(std::move(other)),
        options_(other.options_),
        check_(other.check_),
        flight_(std::move(other.flight_)) {
    std::lock_guard lock(other.p2p_->mutex);
    p2p_->sends = std::move(other.p2p_->sends);
    p2p_->recvs = std::move(other.p2p_->recvs);
    p2p_->ledger.take(other.p2p_->ledger);
  }
  /// Reports this one's unmatched send/recv (drop contract), then takes over `other`'s.
  NoOp& operator=(NoOp&& other) noexcept {
    if (this != &other) {
      report_dropped();
      std::scoped_lock lock(p2p_->mutex, other.p2p_->mutex);
      options_ = other.options_;
      check_ = other.check_;
      flight_ = std::move(other.flight_);
      p2p_->sends = std::move(other.p2p_->sends);
      p2p_->recvs = std::move(other.p2p_->recvs);
      p2p_->ledger.take(other.p2p_->ledger);
    }
    return *this;
  }
  NoOp(const NoOp&) = delete;
  NoOp& operator=(const NoOp&) = delete;
  ~NoOp() { report_dropped(); }

  /// The options this communicator was made with.
  [[nodiscard]] const Options& options() const noexcept { return options_; }

 private:
  friend class Communicator<NoOp>;

  struct Message {
    detail::CallDesc call;
    std::uint64_t address;
    std::size_t bytes;
    // A send of at most detail::eager_bytes is copied here when posted.
    bool copied = false;
    std::array<std::byte, detail::eager_bytes> eager;
    const void* data() const noexcept {
      return copied ? static_cast<const void*>(eager.data()) : detail::to_ptr<const void>(address);
    }
  };
  struct P2p {
    std::mutex mutex;
    std::deque<Message> sends;
    std::deque<Message> recvs;
    std::atomic<std::size_t> groups{0};  // open groups (nothing to batch with one rank)
    detail::SendLedger ledger;           // the consistency check's hashes of the pending sends
  };

  static Options with_environment(Options options) noexcept {
    options = detail::with_environment(options);
    if (detail::unrecognised_on_error() != nullptr) [[unlikely]] {
      static std::atomic<bool> logged{false};
      if (!logged.exchange(true)) {
        try {
          log(LogLevel::error, detail::check_on_error_environment("NoOp [noop]").error().message);
        } catch (...) {
        }
      }
    }
    return options;
  }

  // The front end records every call here.
  detail::FlightRecorder* flight_recorder_impl() const noexcept { return flight_.get(); }

  std::size_t world_size_impl() const noexcept { return 1; }
  std::size_t rank_impl() const noexcept { return 0; }

  template <DType D, ReduceOp Op, class T>
  Status all_reduce_impl(dtype_tag<D>, op_tag<Op>, T*, std::size_t) noexcept {
    return {};  // one rank: the reduction of one contribution is itself (avg divides by 1)
  }
  template <DType D, class T>
  Status broadcast_impl(dtype_tag<D>, T*, std::size_t, std::size_t) noexcept {
    return {};
  }
  template <DType D, class T>
  Status all_gather_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count) noexcept {
    copy(send, recv, count);
    return {};
  }
  template <DType D, ReduceOp Op, class T>
  Status reduce_scatter_impl(dtype_tag<D>, op_tag<Op>, const T* send, T* recv, std::size_t count) noexcept {
    copy(send, recv, count);
    return {};
  }
  // One rank: every rooted or all-to-all collective moves send to recv.
  template <DType D, ReduceOp Op, class T>
  Status reduce_impl(dtype_tag<D>, op_tag<Op>, const T* send, T* recv, std::size_t count, std::size_t) noexcept {
    copy(send, recv, count);
    return {};
  }
  template <DType D, class T>
  Status gather_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count, std::size_t) noexcept {
    copy(send, recv, count);
    return {};
  }
  template <DType D, class T>
  Status scatter_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count, std::size_t) noexcept {
    copy(send, recv, count);
    return {};
  }
  template <DType D, class T>
  Status all_to_all_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count) noexcept {
    copy(send, recv, count);
    return {};
  }
  template <DType D, class T>
  Status all_gather_v_impl(dtype_tag<D>, const T* send, std::size_t send_count, T* recv,
                           const detail::VLayout& layout) noexcept {
    copy(send, recv + layout.displ(0), send_count);
    return {};
  }
  template <DType D, class T>
  Status all_to_all_v_impl(dtype_tag<D>, const T* send, const detail::VLayout& sl, T* recv,
                           const detail::VLayout& rl) {
    if (sl.count(0) != rl.count(0)) {
      return tl::unexpected(error(Errc::mismatch, detail::CallDesc::movement(detail::Call::all_to_all_v, detail::npos, D),
                                  detail::cat("send_counts[0] = ", sl.count(0), " but recv_counts[0] = ", rl.count(0),
                                              ": a pair's counts must be equal")));
    }
    copy(send + sl.displ(0), recv + rl.displ(0), sl.count(0));
    return {};
  }

  Status group_start_impl() noexcept {
    ++p2p_->groups;
    return {};
  }
  Status group_end_impl() {
    if (p2p_->groups == 0) {
      return tl::unexpected(error(Errc::invalid_argument, detail::CallDesc::plain(detail::Call::group_end),
                                  "no open group (group_end without group_start)"));
    }
    --p2p_->groups;
    return {};
  }

  template <DType D, class T>
  Status send_impl(dtype_tag<D>, const T* ptr, std::size_t count, std::size_t dest, std::uint32_t tag) {
    const auto call = detail::CallDesc::p2p(detail::Call::send, count, D, dest, tag);
    const std::size_t bytes = count * sizeof(T);
    std::lock_guard lock(p2p_->mutex);
    // Recorded under the mailbox lock, with its message: a sync() completes both or neither.
    if (check_) [[unlikely]] p2p_->ledger.record(call, ptr, bytes);
    Message& m = p2p_->sends.emplace_back();
    m.call = call;
    m.address = detail::to_address(ptr);
    m.bytes = bytes;
    if (bytes != 0 && bytes <= detail::eager_bytes) {
      std::memcpy(m.eager.data(), ptr, bytes);
      m.copied = true;
    }
    return {};
  }
  template <DType D, class T>
  Status recv_impl(dtype_tag<D>, T* ptr, std::size_t count, std::size_t src, std::uint32_t tag) {
    std::lock_guard lock(p2p_->mutex);
    Message& m = p2p_->recvs.emplace_back();
    m.call = detail::CallDesc::p2p(detail::Call::recv, count, D, src, tag);
    m.address = detail::to_address(ptr);
    m.bytes = count * sizeof(T);
    return {};
  }

  // The oldest pending send (to itself) with the tag that no posted receive
  // will take. Sends are matched at sync(), so a send whose receive is already
  // posted is still queued here, but it is that receive's (as on Threads and
  // Mpi, where the receive takes it at once): probe skips it, matching the
  // posted receives against the sends exactly as sync_impl will.
  Result<std::optional<detail::Envelope>> probe_impl(std::size_t, std::uint32_t tag) {
    std::lock_guard lock(p2p_->mutex);
    const auto& sends = p2p_->sends;
    std::vector<bool> taken;
    try {
      taken.assign(sends.size(), false);
    } catch (const std::bad_alloc&) {
      return tl::unexpected(error(Errc::backend_failure,
                                  detail::CallDesc::p2p(detail::Call::probe, detail::npos, DType::U8, 0, tag),
                                  "out of memory matching the posted receives"));
    }
    for (const Message& r : p2p_->recvs) {
      for (std::size_t i = 0; i < sends.size(); ++i) {
        if (!taken[i] && (r.call.tag == any_tag || sends[i].call.tag == r.call.tag)) {
          taken[i] = true;
          break;
        }
      }
    }
    for (std::size_t i = 0; i < sends.size(); ++i) {
      if (!taken[i] && (tag == any_tag || sends[i].call.tag == tag)) {
        return std::optional<detail::Envelope>{detail::Envelope{0, sends[i].call.tag, sends[i].bytes}};
      }
    }
    return std::optional<detail::Envelope>{};
  }

  // Matches every pending recv with the oldest send of the same tag. With one
  // rank nothing else can ever arrive, so whatever is left unmatched is an
  // error now rather than a hang; the unmatched operations are dropped.
  Status sync_impl() {
    std::lock_guard lock(p2p_->mutex);
    Status result;
    auto& sends = p2p_->sends;
    auto& recvs = p2p_->recvs;
    for (auto r = recvs.begin(); r != recvs.end();) {
      auto s = sends.begin();
      while (s != sends.end() && r->call.tag != any_tag && s->call.tag != r->call.tag) ++s;
      if (s == sends.end()) {
        ++r;
        continue;
      }
      if (result) {
        if (s->call.dtype != r->call.dtype) {
          result = tl::unexpected(error(Errc::mismatch, r->call,
                                        detail::cat("matched ", detail::describe(s->call), " of another dtype")));
        } else if (s->bytes > r->bytes) {
          result = tl::unexpected(error(Errc::truncated, r->call,
                                        detail::cat("message truncated: ", detail::describe(s->call), " sends ",
                                                    s->call.count, " elements, recv posted for ", r->call.count)));
        } else if (s->bytes != 0) {
          std::memmove(detail::to_ptr<void>(r->address), s->data(), s->bytes);
        }
      }
      sends.erase(s);
      r = recvs.erase(r);
    }
    if (result && !recvs.empty()) {
      result = tl::unexpected(error(Errc::mismatch, recvs.front().call, "no matching send on this rank (world of 1)"));
    } else if (result && !sends.empty()) {
      result = tl::unexpected(error(Errc::mismatch, sends.front().call, "no matching recv on this rank (world of 1)"));
    }
    sends.clear();
    recvs.clear();
    // Every send completed: with the check on, none of their buffers may have
    // changed since it was posted.
    if (check_) [[unlikely]] {
      // Under the mailbox lock: every send recorded so far is one this sync completed.
      if (auto changed = p2p_->ledger.verify(p2p_->ledger.mark()); changed && result) {
        result = tl::unexpected(error(Errc::mismatch, *changed, detail::send_changed_text));
      }
    }
    return result;
  }
  Status barrier_impl() { return sync_impl(); }

  Result<std::optional<NoOp>> split_impl(std::uint32_t color, std::uint32_t) {
    if (color == no_color) return std::optional<NoOp>{};
    return std::optional<NoOp>{NoOp(options_)};
  }

  template <class T>
  static void copy(const T* send, T* recv, std::size_t count) noexcept {
    if (count != 0 && static_cast<const void*>(send) != static_cast<const void*>(recv)) {
      std::memmove(static_cast<void*>(recv), static_cast<const void*>(send), count * sizeof(T));
    }
  }

  void report_dropped() noexcept {
    if (!p2p_) return;
    std::lock_guard lock(p2p_->mutex);
    const std::size_t n = p2p_->sends.size() + p2p_->recvs.size();
    if (n != 0) {
      const auto& first = p2p_->sends.empty() ? p2p_->recvs.front() : p2p_->sends.front();
      log(LogLevel::warning, detail::cat("NoOp communicator destroyed with ", n,
                                         " pending point-to-point operation(s), first: ", detail::describe(first.call),
                                         "; dropped"));
      p2p_->sends.clear();
      p2p_->recvs.clear();
    }
    p2p_->ledger.clear();
  }

  Options options_{};
  bool check_ = options_.check_consistency || detail::check_from_environment();
  std::unique_ptr<P2p> p2p_ = std::make_unique<P2p>();
  std::unique_ptr<detail::FlightRecorder> flight_;  // null: Options::flight_record_size 0, or moved from
};

// libpolycoll holds the seed surface of NoOp (and so AnyCommunicator's table
// for it): its dispatch over every (dtype, op) pair is compiled once there.
#if !defined(POLYCOLL_HEADER_ONLY)
extern template class Communicator<NoOp>;
extern template const AnyCommunicator::VTable& AnyCommunicator::vtable_of<NoOp>() noexcept;
#endif

}  // namespace polycoll
