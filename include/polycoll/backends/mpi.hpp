#pragma once
/// @file backends/mpi.hpp
/// Mpi: ranks are MPI processes (MPICH, Open MPI or any MPI-3 library).
///
/// `polycoll::mpi::Environment env(argc, argv);` initialises MPI asking for
/// MPI_THREAD_MULTIPLE (a no-op owner when MPI is already initialised), then
/// `polycoll::Mpi::world()`, `Mpi::borrow(MPI_Comm)` or `Mpi::duplicate(MPI_Comm)`
/// make communicators. Every communicator the backend uses gets
/// MPI_ERRORS_RETURN, and every MPI error becomes an Error carrying
/// MPI_Error_string. Elements travel as MPI's own datatypes; f16, bf16,
/// f8e4m3 and f8e5m2 (which MPI lacks) travel as unsigned integers of their
/// size and are reduced by polycoll's host units as cached user MPI_Ops.
///
/// `BasicMpi<mpi::Policies<Completion, Reduction>>` selects, at compile time,
/// blocking or MPI_I* collectives and MPI's built-in ops or polycoll's units;
/// `polycoll::Mpi` is BasicMpi<mpi::DefaultPolicies>. See docs/mpi.md.

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <new>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <mpi.h>

#include <polycoll/any_communicator.hpp>
#include <polycoll/backends/mpi/environment.hpp>
#include <polycoll/backends/mpi/error.hpp>
#include <polycoll/backends/mpi/halving.hpp>
#include <polycoll/backends/mpi/ordered.hpp>
#include <polycoll/backends/mpi/policies.hpp>
#include <polycoll/backends/mpi/process.hpp>
#include <polycoll/backends/mpi/reduction.hpp>
#include <polycoll/backends/mpi/requests.hpp>
#include <polycoll/backends/mpi/shm.hpp>
#include <polycoll/backends/mpi/state.hpp>
#include <polycoll/backends/mpi/types.hpp>
#include <polycoll/communicator.hpp>
#include <polycoll/detail/call.hpp>
#include <polycoll/detail/linkage.hpp>
#include <polycoll/detail/on_error.hpp>
#include <polycoll/detail/send_check.hpp>
#include <polycoll/detail/std_parts.hpp>
#include <polycoll/detail/text.hpp>
#include <polycoll/detail/wait.hpp>
#include <polycoll/kernels/reduce.hpp>
#include <polycoll/log.hpp>

namespace polycoll {

template <class Policies>
class BasicMpi;

/// The Mpi backend with the measured default policies.
using Mpi = BasicMpi<mpi::DefaultPolicies>;

template <class P, DType D>
struct supports_dtype<BasicMpi<P>, D> : std::true_type {};
template <class P, DType D, ReduceOp Op>
struct supports_reduction<BasicMpi<P>, D, Op> : std::bool_constant<is_valid_v<D, Op>> {};
/// Mpi has probe (MPI_Iprobe) and any_source / any_tag receives.
template <class P>
struct supports_probe<BasicMpi<P>> : std::true_type {};

/// MPI processes as ranks. Move-only; see the file comment and docs/mpi.md.
template <class Policies>
class BasicMpi : public Communicator<BasicMpi<Policies>> {
  using Base = Communicator<BasicMpi<Policies>>;
  using State = detail::mpi::CommState;
  static constexpr bool nonblocking = Policies::completion::is_nonblocking;
  static constexpr bool kernel_for_native = Policies::reduction::kernel_for_native;
  static constexpr bool halving_for_native = [] {
    if constexpr (requires { Policies::reduction::halving_for_native; }) {
      return Policies::reduction::halving_for_native;
    } else {
      return false;
    }
  }();
  // (D, Op) pairs whose blocking all_reduce at 2 ranks takes polycoll's own
  // algorithms: the pairs only polycoll's unit reduces, and the native ones
  // where the policy says so. With both ranks on one node, the shared-memory
  // window up to 4 MiB (backends/mpi/shm.hpp); otherwise, and above, the
  // point-to-point ones (backends/mpi/halving.hpp): the small-message exchange
  // on every MPI it is measured on, the large-message halving on MPICH.
  static bool pair_algorithms(const detail::mpi::Reduction& r) noexcept {
    return halving_for_native || r.always_user_op;
  }
  static_assert(mpi::adaptive_ops::kernel_below_bytes > detail::mpi::exchange_to_bytes,
                "adaptive_ops reduces small messages with polycoll's unit, which the exchange uses");

 public:
  /// The name in error messages and AnyCommunicator::backend_name().
  static constexpr std::string_view backend_name = "mpi";
  /// The completion and reduction policies this communicator was compiled with.
  using policies = Policies;

  /// A communicator over a duplicate of MPI_COMM_WORLD (collective over the world).
  /// With Options::on_error abort (or POLYCOLL_ON_ERROR=abort), a failure of
  /// this or the other factories calls MPI_Abort too.
  [[nodiscard]] static Result<BasicMpi> world(Options options = {}) {
    return made(make("Mpi::world()", MPI_COMM_WORLD, Mode::duplicate, options), MPI_COMM_WORLD, options);
  }
  /// Uses `comm` without owning it (it must outlive the result). Sets
  /// MPI_ERRORS_RETURN on it and restores its previous handler at the end.
  [[nodiscard]] static Result<BasicMpi> borrow(MPI_Comm comm, Options options = {}) {
    return made(make("Mpi::borrow()", comm, Mode::borrow, options), comm, options);
  }
  /// Owns an MPI_Comm_dup of `comm` (collective over comm): its own tag space.
  [[nodiscard]] static Result<BasicMpi> duplicate(MPI_Comm comm, Options options = {}) {
    return made(make("Mpi::duplicate()", comm, Mode::duplicate, options), comm, options);
  }

  /// Takes over `other`'s communicator; `other` is left moved-from (its calls return Errors).
  BasicMpi(BasicMpi&& other) noexcept : Base(std::move(other)), state_(std::move(other.state_)) {}
  /// Releases the held communicator (drop contract), then takes over `other`'s.
  BasicMpi& operator=(BasicMpi&& other) noexcept {
    if (this != &other) {
      release();
      state_ = std::move(other.state_);
    }
    return *this;
  }
  BasicMpi(const BasicMpi&) = delete;
  BasicMpi& operator=(const BasicMpi&) = delete;
  ~BasicMpi() { release(); }

  /// The MPI communicator used (MPI_COMM_NULL when moved-from). Traffic of
  /// your own on it shares polycoll's tag space.
  [[nodiscard]] MPI_Comm native() const noexcept { return state_ ? state_->comm : MPI_COMM_NULL; }
  /// True when this object frees its MPI_Comm (world, duplicate, split).
  [[nodiscard]] bool owns_comm() const noexcept { return state_ && state_->owned; }
  /// True when MPI's thread level is below MPI_THREAD_MULTIPLE, so every MPI
  /// call of polycoll takes one process-wide lock.
  [[nodiscard]] bool serialized() const noexcept { return state_ && state_->serialized; }
  /// The options this communicator was made with.
  [[nodiscard]] const Options& options() const noexcept {
    static const Options none{};
    return state_ ? state_->options : none;
  }
  /// Bytes of shared memory this rank holds for the collectives of a
  /// communicator whose ranks all run on one node (backends/mpi/shm.hpp, the
  /// all_reduce at 2 ranks: up to 2x the largest message of at most 4 MiB so
  /// far; backends/mpi/node_shm.hpp, every collective it serves at 3 or more
  /// ranks and all but all_reduce at 2: up to 2x the largest message of at
  /// most node_shm_to_bytes and a slice) or for the hierarchical path's
  /// window over its node (docs/mpi.md, "Across nodes"; the same bound, for
  /// the node's size); freed with the communicator; 0 when it has none.
  [[nodiscard]] std::size_t shared_window_bytes() const noexcept {
    if (!state_) return 0;
    auto guard = lock();
    return state_->shm.segment_bytes() + state_->node_shm.segment_bytes() + state_->hier_shm.segment_bytes();
  }
  /// The algorithm that served this communicator's last all_reduce (docs/mpi.md,
  /// "Which algorithm serves a call"): "window" (2 ranks on a node), "node
  /// window" (3 or more), "exchange", "halving", "rank order"
  /// (Options::reproducible), "mpi" (MPI_Allreduce or MPI_Iallreduce); "none"
  /// before the first (or when it failed before choosing one).
  [[nodiscard]] std::string_view last_all_reduce_algorithm() const noexcept {
    if (!state_) return "none";
    auto guard = lock();
    return state_->last_all_reduce;
  }
  /// The algorithm that served this communicator's last all_reduce,
  /// broadcast, reduce, all_gather or reduce_scatter (docs/mpi.md, "Which
  /// algorithm serves a call"): an all_reduce's as above; for the others
  /// "hierarchical" (across nodes), "node window", "rank order"
  /// (Options::reproducible) or "mpi"; "none" before the first (or when it
  /// failed before choosing one).
  [[nodiscard]] std::string_view last_algorithm() const noexcept {
    if (!state_) return "none";
    auto guard = lock();
    return state_->last_algorithm;
  }
  /// Operations posted and not yet completed by sync().
  [[nodiscard]] std::size_t pending() const noexcept {
    if (!state_) return 0;
    auto guard = lock();
    return state_->pool.size();
  }

 private:
  friend class Communicator<BasicMpi<Policies>>;
  enum class Mode { borrow, duplicate, adopt };

  explicit BasicMpi(std::unique_ptr<State> s) noexcept : state_(std::move(s)) {}

  // ------------------------------------------------------------ construction

  // A factory's result under Options::on_error: a failure ends the job with
  // MPI_Abort on `comm` (MPI_COMM_WORLD for MPI_COMM_NULL), or with
  // std::abort() when MPI is not usable.
  static Result<BasicMpi> made(Result<BasicMpi>&& r, MPI_Comm comm, const Options& options) {
    return detail::factory_result(detail::on_error_from(options.on_error), std::move(r), [comm](const Error& e) {
      detail::print_fatal(e.message);
      mpi_abort(comm);
      std::abort();
    });
  }

  // MPI_Abort with exit code 1, while MPI is usable (initialised, not finalized).
  // The launcher forwards each rank's stderr on its own schedule, and
  // MPI_Abort can end the job before it has read the fatal line this rank
  // just wrote (MPICH's hydra lost it in about 1 run in 30): a short pause
  // first lets the reason for the abort reach the user.
  static void mpi_abort(MPI_Comm comm) noexcept {
    if (!detail::mpi::mpi_usable()) return;
    std::fflush(nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    MPI_Abort(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, 1);
  }

  // Options::on_error: the front end printed the error; MPI_Abort stops every
  // process of this communicator (in practice, MPICH and Open MPI: the job).
  void abort_impl(const Error&) const noexcept { mpi_abort(state_ ? state_->comm : MPI_COMM_WORLD); }

  static Result<BasicMpi> make(const char* what, MPI_Comm comm, Mode mode, const Options& options);

  // ------------------------------------------------------------ front-end hooks

  std::size_t world_size_impl() const noexcept { return state_ ? state_->size : 1; }
  std::size_t rank_impl() const noexcept { return state_ ? state_->rank : 0; }
  // The front end's errors on a moved-from communicator name that state
  // instead of checks against the placeholder world of 1.
  bool moved_from_impl() const noexcept { return !state_; }
  // The front end records every call here (detail::FlightRecorder).
  detail::FlightRecorder* flight_recorder_impl() const noexcept { return state_ ? state_->flight.get() : nullptr; }

  using Guard = std::unique_lock<detail::mpi::SubmitLock>;
  Guard lock() const noexcept {
    return Guard(state_->serialized ? detail::mpi::process().serial : state_->mutex);
  }

  // Common entry checks: a live communicator, MPI not finalized, an int count.
  // live() is the hot-path test; enter() builds the error when it fails. With
  // enter() out of line, the consistency check's call behind its flag and the
  // SubmitLock, a call adds a few nanoseconds to MPI's own (docs/mpi.md,
  // "Per-call cost").
  bool live(std::size_t count) const noexcept {
    return state_ && !detail::mpi::process().finalized.load(std::memory_order_relaxed) &&
           count <= static_cast<std::size_t>(INT_MAX);
  }
  [[gnu::noinline, gnu::cold]] Status enter(const detail::CallDesc& c, std::size_t count) const {
    if (!state_) return tl::unexpected(detail::call_error(Errc::invalid_argument, c, 0, 0, backend_name,
                                                          "moved-from communicator"));
    if (detail::mpi::process().finalized.load(std::memory_order_relaxed)) [[unlikely]] {
      return tl::unexpected(this->error(Errc::not_initialized, c, "MPI has been finalized"));
    }
    if (count > static_cast<std::size_t>(INT_MAX)) [[unlikely]] {
      return tl::unexpected(this->error(Errc::unsupported, c,
                                        detail::cat("count ", count, " exceeds INT_MAX, the largest MPI-3 count")));
    }
    return {};
  }

  Status mpi_error(const detail::CallDesc& c, int rc, const char* fn) const {
    return tl::unexpected(this->error(detail::mpi::errc_of(rc), c,
                                      detail::cat(fn, ": ", detail::mpi::error_text(rc)), rc));
  }

  // The MPI_Op of (D, Op) under this policy; rc set on failure.
  // `bytes` is the same on every rank for one call, so every rank picks the same
  // op; `predefined` makes adaptive_ops take MPI's op below its threshold too
  // (all_reduce at 2 ranks where MPI's predefined op measured faster).
  static MPI_Op op_for(const detail::mpi::Reduction& r, int& rc, [[maybe_unused]] std::size_t bytes,
                       [[maybe_unused]] bool predefined = false) noexcept {
    using R = typename Policies::reduction;
    if (r.builtin != nullptr && !kernel_for_native) {
      if constexpr (requires { R::kernel_below_bytes; }) {
        if (bytes < R::kernel_below_bytes && !predefined) return cached_user_op(r, rc);
      }
      return r.builtin();
    }
    return cached_user_op(r, rc);
  }
  // The pair's user op: the process's cache read here (the common case, no
  // call), r.user_op (which creates it) the first time.
  static MPI_Op cached_user_op(const detail::mpi::Reduction& r, int& rc) noexcept {
    const auto& p = detail::mpi::process();
    if (p.ready[r.op_slot].load(std::memory_order_acquire)) [[likely]] return p.ops[r.op_slot];
    return r.user_op(rc);
  }

  detail::CallDesc numbered(detail::CallDesc c) noexcept {
    c.seq = ++state_->seq;
    return c;
  }

  // ------------------------------------------------------------ timeouts and the consistency check

  static constexpr std::size_t fp_words = std::tuple_size_v<detail::Fingerprint>;

  // The deadline of a call that starts now (none without op_timeout: one test).
  std::optional<detail::Clock::time_point> deadline() const {
    return detail::deadline_after(state_->options.op_timeout);
  }

  // Completes `req`, the MPI_I* form of collective `c` (numbered) posted by a caller
  // that blocks (the blocking policy with op_timeout set, an internal
  // exchange), polling until `deadline`. On expiry the collective stays
  // posted, since MPI cannot cancel one: it joins the pending operations, so
  // the error lists it, a later sync() can still complete it (its buffers
  // must stay valid until then) and the destructor drops it. Lock held.
  // `scratch`, memory the collective writes, goes with it to the pending
  // operations when it times out.
  Status await(MPI_Request& req, const detail::CallDesc& c, MPI_Datatype dt, const detail::mpi::Finish& f,
               const char* fn, const std::optional<detail::Clock::time_point>& deadline,
               std::unique_ptr<std::byte[]> scratch = {}) {
    // MPI progresses the collective only inside MPI_Test (no progress
    // thread), so it is called back to back, yielding now and then, for the
    // first millisecond; only a call still waiting after that (a late peer)
    // sleeps 20 us between tests: sleeping from the start stalls MPI's
    // progress on calls that would finish within it (docs/reliability.md).
    const auto start = detail::Clock::now();
    for (unsigned polls = 1;; ++polls) {
      int flag = 0;
      MPI_Status st{};
      const int rc = MPI_Test(&req, &flag, &st);
      if (rc != MPI_SUCCESS) return mpi_error(c, rc, fn);
      if (flag) {
        f.run();
        return {};
      }
      const auto now = detail::Clock::now();
      if (now >= *deadline) break;
      if (now - start > std::chrono::milliseconds(1)) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      } else if (polls % 64 == 0) {
        std::this_thread::yield();
      }
    }
    state_->pool.add(req, c, dt, f, std::move(scratch));
    return tl::unexpected(this->error(
        Errc::timeout, c,
        detail::cat("timed out after ", state_->options.op_timeout->count(), " ms (did every rank make this call?)",
                    missing_text(), "; pending: ", pending_text(),
                    "; the collective stays posted (MPI cannot cancel one): its buffers "
                    "must stay valid until a later sync() completes it")));
  }

  // A posted MPI_I* collective: kept for sync() under the nonblocking policy,
  // completed now (bounded by `deadline`) under the blocking one.
  Status posted(MPI_Request req, const detail::CallDesc& c, MPI_Datatype dt, const detail::mpi::Finish& f,
                const char* fn, const std::optional<detail::Clock::time_point>& deadline,
                std::unique_ptr<std::byte[]> scratch = {}) {
    if constexpr (nonblocking) {
      state_->pool.add(req, numbered(c), dt, f, std::move(scratch));
      return {};
    } else {
      return await(req, numbered(c), dt, f, fn, deadline, std::move(scratch));
    }
  }

  // A blocking internal all-gather of `words` uint64 per rank from the end of
  // state_->xbuf into its front, bounded by `deadline` when set. On a timeout
  // the buffer is retired (MPI may still write it) and replaced. Lock held.
  Status exchange(const detail::CallDesc& c, std::size_t words,
                  const std::optional<detail::Clock::time_point>& deadline) {
    auto& x = state_->xbuf;
    const std::uint64_t* mine = x.data() + words * state_->size;
    const int n = static_cast<int>(words);
    if (!deadline) {
      const int rc = MPI_Allgather(mine, n, MPI_UINT64_T, x.data(), n, MPI_UINT64_T, state_->comm);
      if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Allgather");
      return {};
    }
    MPI_Request req = MPI_REQUEST_NULL;
    const int rc = MPI_Iallgather(mine, n, MPI_UINT64_T, x.data(), n, MPI_UINT64_T, state_->comm, &req);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Iallgather");
    auto done = await(req, numbered(c), MPI_DATATYPE_NULL, {}, "MPI_Iallgather", deadline);
    if (!done) {
      try {
        std::vector<std::uint64_t> fresh(x.size());
        state_->retired_x.push_back(std::move(x));
        x = std::move(fresh);
      } catch (const std::bad_alloc&) {
        // Keeping the old buffer in place is all that is left: the check stays usable.
      }
    }
    return done;
  }

  // Room in the pending operations for what this submission may leave
  // there (RequestPool::reserve_more), made before it posts anything. Lock held.
  Status room(const detail::CallDesc& c) {
    try {
      state_->pool.reserve_more(1);
      if (state_->check) state_->ledger.reserve_more(1);  // a checked send records its hash after posting
      return {};
    } catch (const std::bad_alloc&) {
      return tl::unexpected(this->error(Errc::backend_failure, c, "out of memory for the pending operations"));
    }
  }

  // What a collective does under the lock before it posts: count it (and
  // publish it on the status board), room, then the consistency check.
  Status preflight(const detail::CallDesc& c, const std::optional<detail::Clock::time_point>& deadline) {
    entering(c);
    if (auto s = room(c); !s) return s;
    return check(c, deadline);
  }
  void entering(const detail::CallDesc& c) noexcept {
    ++state_->collectives;
    state_->board.enter(state_->collectives, c.call);
  }

  // The status board's account of a collective that timed out: which ranks
  // of this node have not entered it yet, and what each of them entered
  // last; ranks on other nodes are not visible. Empty without a board.
  std::string missing_text() const {
    const auto& b = state_->board;
    if (!b.ready()) return {};
    const std::uint64_t here = state_->collectives;
    const auto mine = b.entered(state_->rank);
    std::string missing, doing, other;
    std::size_t elsewhere = 0;
    auto name = [](const detail::mpi::StatusBoard::Entered& e) {
      return detail::cat("#", e.number, " ", detail::call_names[static_cast<std::size_t>(e.call)]);
    };
    for (std::size_t q = 0; q < state_->size; ++q) {
      if (q == state_->rank) continue;
      const auto e = b.entered(q);
      if (!e) {
        ++elsewhere;
      } else if (e->number < here) {
        missing += detail::cat(missing.empty() ? "" : ", ", q);
        doing += e->number == 0 ? detail::cat("; rank ", q, " has entered no collective yet")
                                : detail::cat("; rank ", q, "'s last collective: ", name(*e));
      } else if (e->number > here || (mine && e->call != mine->call)) {
        // Numbered alike but another call, or further on: not this collective either.
        other += detail::cat("; rank ", q, " is in ", name(*e), " instead");
      }
    }
    std::string t;
    if (!missing.empty()) {
      t = detail::cat("; rank(s) ", missing, " have not entered this collective (#", here, " on this communicator)",
                      doing);
    }
    t += other;
    if (missing.empty() && other.empty() && elsewhere == 0) {
      t = detail::cat("; every rank has entered this collective (#", here, " on this communicator)");
    }
    if (elsewhere != 0) t += detail::cat("; ", elsewhere, " rank(s) on other nodes are not visible");
    return t;
  }

  // The consistency check (Options::check_consistency or POLYCOLL_CHECK=1):
  // before each collective the ranks compare their fingerprints (call,
  // count, dtype, op, root, sequence number); any difference is
  // Errc::mismatch on every rank, naming what each differing rank called,
  // instead of a hang or corrupted data. Lock held. Where the fingerprints
  // travel:
  // - the shared-memory window of a communicator whose ranks all run on one
  //   node (2 ranks: PairShm, whose line also checks the calls NodeShm serves
  //   there; 3 or more: NodeShm), once it exists (the
  //   first window all_reduce makes it), blocking and without op_timeout: a
  //   window all_reduce carries the packed fingerprint in the line that
  //   announces its operand (all_reduce_into), every other collective sends
  //   it alone through the same line (check_only), so all ranks meet
  //   whatever each called;
  // - otherwise one MPI_Allgather of 48 bytes per rank per collective.
  // The window only says whether the fingerprints match: on a mismatch every
  // rank then all-gathers the full ones for the message (mismatch_detail).
  // Inline flag test, out-of-line exchange: with the check off, a collective
  // pays one load and branch (the success Status folds away).
  Status check(const detail::CallDesc& call, const std::optional<detail::Clock::time_point>& deadline) {
    if (!state_->check) [[likely]] return {};
    return check_fingerprints(call, deadline);
  }
  // The call as the check numbers it. Ranks that disagree about
  // Options::reproducible would run different algorithms
  // (backends/mpi/ordered.hpp) into a hang or wrong bits: it is part of it.
  detail::CallDesc checked(const detail::CallDesc& call) noexcept {
    detail::CallDesc c = call;
    c.seq = ++state_->coll_seq;
    c.reproducible = c.has_op && state_->options.reproducible;
    return c;
  }
  // The window carries the check (see above): the same answer on every
  // rank, as the window's state changes only in calls all ranks make together.
  bool window_checks(const std::optional<detail::Clock::time_point>& deadline) const noexcept {
    return !nonblocking && !deadline &&
           (state_->size == 2 ? state_->shm.ready() : state_->size >= 3 && state_->node_shm.ready());
  }
  [[gnu::noinline]] Status check_fingerprints(const detail::CallDesc& call,
                                              const std::optional<detail::Clock::time_point>& deadline) {
    const detail::CallDesc c = checked(call);
    const bool window = window_checks(deadline);
    if (window) {
      const detail::PackedFingerprint fp = detail::pack_fingerprint(c);
      if (state_->size == 2 ? state_->shm.check_only(fp) : state_->node_shm.check_only(fp)) return {};
    }
    return mismatch_detail(c, deadline, window);
  }
  // All-gathers the full fingerprints and compares them: the check itself
  // where no window carries it, the message where the window found a
  // difference (`differed`: then every rank is here, as each saw its peer
  // differ, and the call fails even if the full fingerprints agreed).
  [[gnu::noinline]] Status mismatch_detail(const detail::CallDesc& c,
                                           const std::optional<detail::Clock::time_point>& deadline,
                                           bool differed = false) {
    const std::size_t w = state_->size;
    auto& x = state_->xbuf;
    const detail::Fingerprint mine = detail::fingerprint(c);
    std::copy(mine.begin(), mine.end(), x.begin() + static_cast<std::ptrdiff_t>(fp_words * w));
    if (auto s = exchange(c, fp_words, deadline); !s) return s;
    std::string diff = detail::fingerprint_diff(x.data(), w, c);
    if (diff.empty()) {
      if (!differed) return {};
      diff = "the fingerprints differ";  // unreachable: the packed ones are functions of the full ones
    }
    return tl::unexpected(this->error(Errc::mismatch, c, detail::cat("consistency check failed: ", diff)));
  }

  // ------------------------------------------------------------ collectives

  template <DType D, ReduceOp Op, class T>
  Status all_reduce_impl(dtype_tag<D> d, op_tag<Op> o, T* buf, std::size_t count);

  // Out of place (the front end passed send != recv, disjoint). MPI's own
  // all_reduce gets both buffers (MPI_Allreduce / MPI_Iallreduce(send, recv));
  // where one of the 2-rank algorithms below runs instead (they work in
  // place), recv first takes a copy of send. docs/mpi.md has the measurement.
  template <DType D, ReduceOp Op, class T>
  Status all_reduce_impl(dtype_tag<D> d, op_tag<Op> o, const T* send, T* recv, std::size_t count);

  // all_reduce_value: blocking and without op_timeout, the one-element
  // all_reduce returns complete (nothing of it can stay posted). Otherwise it
  // may: a timed-out MPI_Iallreduce stays posted and MPI writes its buffer
  // when it completes, so the value travels in a heap cell that is leaked,
  // not freed, when the call fails (as a timed-out collective's scratch is).
  // The nonblocking policy completes it with sync(), which completes the
  // work posted before it too (docs/mpi.md).
  template <DType D, ReduceOp Op, class T>
  Status all_reduce_value_impl(dtype_tag<D> d, op_tag<Op> o, T* value);

  // all_reduce into `buf`: in place when `send` is null, else from `send`.
  Status all_reduce_into(const detail::mpi::Reduction& r, const void* send, void* buf, std::size_t count) {
    const auto c = detail::CallDesc::reduction(detail::Call::all_reduce, count, r.dtype, r.op);
    if (!live(count)) [[unlikely]] return enter(c, count);
    int rc = MPI_SUCCESS;
    const std::size_t bytes = count * r.size;
    const MPI_Op op = op_for(r, rc, bytes, state_->size == 2 && detail::mpi::predefined_at_2(bytes));
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Op_create");
    // (Read where an MPI call needs it: the windows do not.)
    const auto dt = [&r] { return r.datatype(); };
    const int n = static_cast<int>(count);
    const auto dl = deadline();
    auto guard = lock();
    state_->last_all_reduce = state_->last_algorithm = "none";
    // With the check on, a call that the window will carry as it is (no
    // growth) sends its fingerprint with its operand (check() above).
    std::optional<detail::CallDesc> rides;
    const bool pair = pair_algorithms(r);
    // POLYCOLL_MPI_ALL_REDUCE: what it forces where it can serve this call;
    // the usual choice elsewhere (docs/mpi.md, "Which algorithm serves a
    // call"). The ranks agree on it when pair_comm is made (below); until
    // then nothing is forced, and no window exists for a check to ride.
    using detail::mpi::ForcedAllReduce;
    const bool fits_exchange =
        detail::mpi::exchange_to_bytes > 0 && count != 0 && bytes <= detail::mpi::exchange_to_bytes;
    bool force_mpi = false, force_exchange = false, force_halving = false;
    const auto plan = [&] {
      const ForcedAllReduce forced = state_->forced;
      force_mpi = forced == ForcedAllReduce::mpi;
      force_exchange = forced == ForcedAllReduce::exchange && state_->size == 2 && fits_exchange;
      force_halving = forced == ForcedAllReduce::halving && state_->size == 2 && count != 0;
      return !force_mpi && !force_exchange && !force_halving;
    };
    bool window_allowed = plan();
    if (pair && window_allowed) {
      // (window_checks: the window of this size of communicator is ready.)
      const auto fits = [&] {
        return state_->size == 2 ? bytes <= detail::mpi::shm_to_bytes && state_->shm.fits(count, r.size)
                                 : bytes <= detail::mpi::node_shm_to_bytes(state_->size) &&
                                       state_->node_shm.fits(count, r.size);
      };
      // (Not with POLYCOLL_MPI_NODE_SIZE: the hierarchical path, which a
      // fingerprint cannot ride, may serve the call through another window.)
      if (state_->check && window_checks(dl) && count != 0 && fits() && !ordered(r) && state_->fake_node == 0) {
        entering(c);
        if (auto s = room(c); !s) return s;
        rides = checked(c);
      }
    }
    if (!rides) {
      if (auto s = preflight(c, dl); !s) return s;
    }
    // polycoll's algorithms run on their own dup of comm, made at the first
    // blocking all_reduce that may take one, after the check (a mismatched
    // call fails it there instead of waiting in MPI_Comm_dup): every rank
    // comes here in the same call.
    if (pair && !nonblocking && !dl && state_->size >= 2 && count != 0 && state_->pair_comm == MPI_COMM_NULL) {
      if (auto s = make_pair_comm(c); !s) return s;
      window_allowed = plan();
    }
    // The ranks span nodes, or POLYCOLL_MPI_NODE_SIZE says they do: the
    // hierarchical all_reduce (docs/mpi.md, "Across nodes"), decided with
    // pair_comm (make_pair_comm). Not in rank order: never where
    // Options::reproducible asks for the rank-order fold.
    const bool hierarchical =
        pair && window_allowed && !nonblocking && !dl && count != 0 && !ordered(r) && state_->hierarchical();
    // The node window folds in rank order, the order Options::reproducible
    // asks for: where it may serve the call, the rank-order path waits to
    // see whether it does (below).
    bool node_window = false;
    if (pair && window_allowed && !hierarchical) {
      node_window = !nonblocking && !dl && state_->size >= 3 && count != 0 &&
                    bytes <= detail::mpi::node_shm_to_bytes(state_->size) && !state_->node_shm.refused();
    }
    if (ordered(r) && !node_window) {
      state_->last_all_reduce = state_->last_algorithm = "rank order";
      return ordered_reduce(r, c, send ? send : buf, buf, count, true, 0, dl);
    }
    if (nonblocking || dl) {
      MPI_Request req = MPI_REQUEST_NULL;
      rc = MPI_Iallreduce(send ? send : MPI_IN_PLACE, buf, n, dt(), op, state_->comm, &req);
      if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Iallreduce");
      state_->last_all_reduce = state_->last_algorithm = "mpi";
      detail::mpi::Finish f;
      if (r.avg()) f = {r.divide_finish, buf, nullptr, count, state_->size};
      return posted(req, c, dt(), f, "MPI_Iallreduce", dl);
    } else {
      bool done = false;
      if (hierarchical) {
        if (auto s = hierarchical_all_reduce(r, c, send, buf, count, op, done); !s) return s;
        if (done) {
          send = nullptr;
          state_->last_all_reduce = state_->last_algorithm = "hierarchical";
        }
      } else if (pair) {
        const bool small = !force_mpi && !force_halving && fits_exchange;
        const bool large = force_halving || (!force_mpi && !force_exchange && detail::mpi::halving_mpi &&
                                             bytes >= detail::mpi::halving_from_bytes);
        const bool window = window_allowed && count != 0 && bytes <= detail::mpi::shm_to_bytes;
        if (state_->size == 2 && (small || large || window)) {
          if (window) {
            rc = state_->shm.ensure(state_->pair_comm, state_->rank, count, r.size);
            if (rc != MPI_SUCCESS) {
              return mpi_error(c, rc, "MPI_Comm_split_type/MPI_Win_allocate_shared (2-rank all_reduce window)");
            }
          }
          const bool via_window = window && state_->shm.ready();
          if (send && (small || large) && !via_window) {
            std::memcpy(buf, send, bytes);
            send = nullptr;  // in place from here on
          }
          if (via_window) {
            // The window reads the operand from `send` and copies it into
            // `buf` only once the fingerprints matched: a mismatch leaves
            // `buf` as it was, as the all-gathered check does.
            const void* const operand = send ? send : buf;
            if (rides) {
              const detail::PackedFingerprint fp = detail::pack_fingerprint(*rides);
              if (!state_->shm.all_reduce(r.body, r.size, operand, buf, count, &fp)) [[unlikely]] {
                return mismatch_detail(*rides, dl, true);
              }
            } else {
              state_->shm.all_reduce(r.body, r.size, operand, buf, count);
            }
            send = nullptr;
            done = true;
            state_->last_all_reduce = state_->last_algorithm = "window";
          } else if (small) {
            rc = detail::mpi::exchange_allreduce_2(r.body, r.size, dt(), buf, count, state_->rank, state_->pair_comm);
            if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Sendrecv (2-rank exchange all_reduce)");
            done = true;
            state_->last_all_reduce = state_->last_algorithm = "exchange";
          } else if (large) {
            rc = detail::mpi::halving_allreduce_2(r.body, r.size, dt(), buf, count, state_->rank, state_->pair_comm,
                                                  state_->halving_scratch);
            if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Sendrecv (halving all_reduce)");
            done = true;
            state_->last_all_reduce = state_->last_algorithm = "halving";
          }
        } else if (node_window) {
          // Every rank on one node: the p-rank window (backends/mpi/node_shm.hpp).
          rc = state_->node_shm.ensure(state_->pair_comm, state_->rank, state_->size, count, r.size);
          if (rc != MPI_SUCCESS) {
            return mpi_error(c, rc, "MPI_Comm_split_type/MPI_Win_allocate_shared (node all_reduce window)");
          }
          if (state_->node_shm.ready()) {
            // As at 2 ranks: with the check riding, a mismatch leaves `buf` as it was.
            const void* const operand = send ? send : buf;
            if (rides) {
              const detail::PackedFingerprint fp = detail::pack_fingerprint(*rides);
              if (!state_->node_shm.all_reduce(r.body, r.size, operand, buf, count, &fp)) [[unlikely]] {
                return mismatch_detail(*rides, dl, true);
              }
            } else {
              state_->node_shm.all_reduce(r.body, r.size, operand, buf, count);
            }
            send = nullptr;
            done = true;
            state_->last_all_reduce = state_->last_algorithm = "node window";
          }
        }
      }
      // The node window was refused just now: the rank-order path after all.
      if (!done && ordered(r)) {
        state_->last_all_reduce = state_->last_algorithm = "rank order";
        return ordered_reduce(r, c, send ? send : buf, buf, count, true, 0, dl);
      }
      if (!done) {
        rc = MPI_Allreduce(send ? send : MPI_IN_PLACE, buf, n, dt(), op, state_->comm);
        if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Allreduce");
        state_->last_all_reduce = state_->last_algorithm = "mpi";
      }
      if (r.avg()) r.divide(buf, count, state_->size);
    }
    return {};
  }

  // pair_comm, and the ranks' agreement on POLYCOLL_MPI_ALL_REDUCE: one
  // MPI_Allreduce (MPI_MAX) of (code, -code, invalid). When the ranks'
  // codes differ, nothing is forced (a rank alone on another path would
  // wait for the others forever); when any rank's value is not one of the
  // names, this call fails on every rank, naming it, and nothing is forced.
  Status make_pair_comm(const detail::CallDesc& c) {
    int rc = MPI_Comm_dup(state_->comm, &state_->pair_comm);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Comm_dup (polycoll's all_reduce algorithms)");
    const bool invalid = state_->forced_local == detail::mpi::ForcedAllReduce::invalid;
    const int mine = invalid ? 0 : static_cast<int>(state_->forced_local);
    // POLYCOLL_MPI_NODE_SIZE likewise, in the same call.
    const bool bad_node = state_->fake_node_local < 0;
    const int node = bad_node ? 0 : static_cast<int>(state_->fake_node_local);
    int codes[6] = {mine, -mine, invalid ? 1 : 0, node, -node, bad_node ? 1 : 0};
    rc = MPI_Allreduce(MPI_IN_PLACE, codes, 6, MPI_INT, MPI_MAX, state_->pair_comm);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Allreduce (POLYCOLL_MPI_ALL_REDUCE, POLYCOLL_MPI_NODE_SIZE)");
    state_->forced = codes[0] == -codes[1] && codes[2] == 0 ? static_cast<detail::mpi::ForcedAllReduce>(codes[0])
                                                          : detail::mpi::ForcedAllReduce::none;
    state_->fake_node = codes[3] == -codes[4] && codes[5] == 0 ? codes[3] : 0;
    if (codes[5] != 0) [[unlikely]] {
      return tl::unexpected(this->error(
          Errc::invalid_argument, c,
          bad_node ? detail::cat("POLYCOLL_MPI_NODE_SIZE=\"", state_->fake_node_text,
                                 "\" is not a number of ranks from 1 to 2^30 (the real nodes serve this communicator)")
                   : std::string("POLYCOLL_MPI_NODE_SIZE on another rank is not a number of ranks from 1 to 2^30 "
                                 "(the real nodes serve this communicator)")));
    }
    if (codes[2] != 0) [[unlikely]] {
      return tl::unexpected(this->error(
          Errc::invalid_argument, c,
          invalid ? detail::cat("POLYCOLL_MPI_ALL_REDUCE=\"", state_->forced_text,
                                "\" is not one of auto, mpi, window, exchange, halving (nothing is forced on this "
                                "communicator)")
                  : std::string("POLYCOLL_MPI_ALL_REDUCE on another rank is not one of auto, mpi, window, exchange, "
                                "halving (nothing is forced on this communicator)")));
    }
    // The hierarchical all_reduce's decision, here because every rank makes
    // pair_comm in the same call and after the consistency check: a decision
    // at the first all_reduce instead would call MPI while a rank whose call
    // differs waits for the others in a window's line, whose check (riding a
    // call once the window exists) is what would have told them apart.
    if (state_->size >= 3 || state_->fake_node > 0) return decide_hierarchy(c);
    return {};
  }

  // CommState::hierarchy's decision (at 3 or more ranks, or with
  // POLYCOLL_MPI_NODE_SIZE), collective over pair_comm: the nodes
  // (POLYCOLL_MPI_NODE_SIZE's consecutive ranks, or MPI_Comm_split_type's),
  // and whether they serve: two or more, all of one size, and the windows
  // allowed on every rank (one MPI_Allreduce). Real nodes of one rank each
  // do not: MPI's own all_reduce moves the same messages without the copies.
  // Where they serve, every rank's place (hier_where) is all-gathered.
  Status decide_hierarchy(const detail::CallDesc& c) {
    auto& s = *state_;
    s.hierarchy = detail::mpi::CommState::Hierarchy::no;
    const int rank = static_cast<int>(s.rank);
    int rc = s.fake_node > 0
                 ? MPI_Comm_split(s.pair_comm, static_cast<int>(s.rank / static_cast<std::size_t>(s.fake_node)), rank,
                                  &s.node_comm)
                 : MPI_Comm_split_type(s.pair_comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &s.node_comm);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Comm_split_type (the nodes of the hierarchical all_reduce)");
    int local = 1, local_rank = 0;
    MPI_Comm_size(s.node_comm, &local);
    MPI_Comm_rank(s.node_comm, &local_rank);
    // (Out of memory for the table on any rank: the path does not serve.)
    bool table = true;
    try {
      s.hier_where.assign(2 * s.size, 0);
    } catch (const std::bad_alloc&) {
      table = false;
    }
    int v[3] = {local, -local, detail::mpi::shm_allowed() && table ? 0 : 1};
    rc = MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_INT, MPI_MAX, s.pair_comm);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Allreduce (the nodes of the hierarchical all_reduce)");
    const bool one_size = v[0] == -v[1];
    const std::size_t nodes = s.size / static_cast<std::size_t>(local);
    if (!one_size || v[2] != 0 || nodes < 2 || (local < 2 && s.fake_node == 0)) {
      MPI_Comm_free(&s.node_comm);
      s.hier_where = {};
      return {};
    }
    rc = MPI_Comm_split(s.pair_comm, local_rank, rank, &s.cross_comm);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Comm_split (the node peers of the hierarchical all_reduce)");
    int place[2] = {local_rank, 0};
    MPI_Comm_rank(s.cross_comm, &place[1]);
    rc = MPI_Allgather(place, 2, MPI_INT, s.hier_where.data(), 2, MPI_INT, s.pair_comm);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Allgather (the places of the hierarchical path's ranks)");
    s.node_rank = static_cast<std::size_t>(local_rank);
    s.node_size = static_cast<std::size_t>(local);
    s.hierarchy = detail::mpi::CommState::Hierarchy::yes;
    return {};
  }

  // The hierarchical all_reduce (docs/mpi.md, "Across nodes") of `count`
  // elements into `buf` from `send` (null: in place), in chunks the node
  // window holds (node_shm_to_bytes of the node's size). `done` stays false
  // when some node's window could not be made: every rank learns it (one
  // MPI_Allreduce), the path is not tried again, and the caller goes on with
  // MPI's own all_reduce. `op`: the pair's MPI op (Avg: Sum's; the caller
  // divides).
  Status hierarchical_all_reduce(const detail::mpi::Reduction& r, const detail::CallDesc& c, const void* send,
                                 void* buf, std::size_t count, MPI_Op op, bool& done) {
    auto& s = *state_;
    using Hierarchy = detail::mpi::CommState::Hierarchy;
    const std::size_t per = std::max<std::size_t>(1, detail::mpi::node_shm_to_bytes(s.node_size) / r.size);
    bool ready = false;
    if (auto st = hierarchical_window(c, std::min(per, count), r.size, false, ready); !st || !ready) return st;
    const auto* from = static_cast<const std::byte*>(send ? send : buf);
    auto* to = static_cast<std::byte*>(buf);
    for (std::size_t at = 0; at < count; at += per) {
      const std::size_t m = std::min(per, count - at);
      const int rc = s.hier_shm.all_reduce_across(r.body, r.size, from + at * r.size, to + at * r.size, m,
                                                  r.datatype(), op, s.cross_comm);
      if (rc != MPI_SUCCESS) [[unlikely]] {
        s.hierarchy = Hierarchy::broken;
        return mpi_error(c, rc, "MPI_Allreduce (the hierarchical all_reduce, across nodes)");
      }
    }
    done = true;
    return {};
  }

  // The hierarchical path's node window (and, with `scratch`, hier_scratch),
  // ready for `m` elements of `es` bytes. When either must grow, every rank
  // grows it in the same call (their states change together) and learns
  // with one MPI_Allreduce whether every node could: `ready` false when some
  // could not, and the path is off from then on (hierarchy no). Fails when
  // an earlier call broke the path (hierarchy broken).
  Status hierarchical_window(const detail::CallDesc& c, std::size_t m, std::size_t es, bool scratch, bool& ready) {
    auto& s = *state_;
    using Hierarchy = detail::mpi::CommState::Hierarchy;
    ready = false;
    if (s.hierarchy == Hierarchy::broken) [[unlikely]] {
      return tl::unexpected(this->error(Errc::backend_failure, c,
                                        "an earlier hierarchical call failed in MPI between its phases; the node "
                                        "window it left cannot be used again"));
    }
    const bool fits = s.hier_shm.fits(m, es);
    if (fits && (!scratch || s.hier_scratch.size() >= m * es)) {
      ready = true;
      return {};
    }
    int ok = 1;
    if (!fits) {
      const int made = s.hier_shm.ensure(s.node_comm, s.node_rank, s.node_size, m, es);
      ok = made == MPI_SUCCESS && s.hier_shm.ready() ? 1 : 0;
    }
    if (scratch && s.hier_scratch.size() < m * es) {
      try {
        s.hier_scratch.resize(m * es);
      } catch (const std::bad_alloc&) {
        ok = 0;
      }
    }
    const int rc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, s.pair_comm);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Allreduce (the hierarchical path's windows)");
    if (ok == 0) s.hierarchy = Hierarchy::no;
    ready = ok != 0;
    return {};
  }

  // The hierarchical broadcast (docs/mpi.md, "Across nodes") of `bytes` at
  // `buf` from `root`, in chunks the node window holds: each chunk goes by
  // MPI_Bcast among the ranks of the root's index on every node, then
  // through each node's window from that rank. `done`: as in
  // hierarchical_all_reduce. A failed MPI_Bcast breaks the path (the
  // window's counters carry the failure: NodeShm::broadcast_across).
  Status hierarchical_broadcast(const detail::CallDesc& c, void* buf, std::size_t bytes, std::size_t root,
                                bool& done) {
    auto& s = *state_;
    const std::size_t per = detail::mpi::node_shm_to_bytes(s.node_size);
    bool ready = false;
    if (auto st = hierarchical_window(c, std::min(per, bytes), 1, false, ready); !st || !ready) return st;
    const auto local_root = static_cast<std::size_t>(s.hier_where[2 * root]);
    const int cross_root = s.hier_where[2 * root + 1];
    auto* at = static_cast<std::byte*>(buf);
    for (std::size_t off = 0; off < bytes; off += per) {
      const int rc = s.hier_shm.broadcast_across(at + off, std::min(per, bytes - off), local_root, cross_root,
                                                 s.cross_comm);
      if (rc != MPI_SUCCESS) [[unlikely]] {
        s.hierarchy = detail::mpi::CommState::Hierarchy::broken;
        return mpi_error(c, rc, "MPI_Bcast (the hierarchical broadcast, across nodes)");
      }
    }
    done = true;
    return {};
  }

  // The hierarchical reduce (docs/mpi.md, "Across nodes") of `count`
  // elements from `send` into the root's `recv`, in chunks the node window
  // holds: each chunk is reduced through each node's window (in rank order)
  // to the rank of the root's index there, into hier_scratch, and those
  // ranks MPI_Reduce (`op`; Avg: Sum's, the root divides) the node results
  // to the root. A failed MPI_Reduce leaves the window as it was: the rank
  // that saw it goes on through the window's remaining chunks (its node's
  // ranks wait for it there) without MPI, then returns the error. The path
  // is not marked broken: its node's ranks, which saw no error, would wait
  // for it in the window's next call. Its node peers elsewhere may be left
  // in an MPI_Reduce: as after any failed MPI collective, the communicator
  // is not usable. `done`: as in hierarchical_all_reduce.
  Status hierarchical_reduce(const detail::mpi::Reduction& r, const detail::CallDesc& c, const void* send,
                             void* recv, std::size_t count, std::size_t root, MPI_Op op, bool& done) {
    auto& s = *state_;
    const std::size_t per = std::max<std::size_t>(1, detail::mpi::node_shm_to_bytes(s.node_size) / r.size);
    bool ready = false;
    if (auto st = hierarchical_window(c, std::min(per, count), r.size, true, ready); !st || !ready) return st;
    const auto local_root = static_cast<std::size_t>(s.hier_where[2 * root]);
    const int cross_root = s.hier_where[2 * root + 1];
    const bool at_root = s.rank == root;
    const auto* from = static_cast<const std::byte*>(send);
    auto* to = static_cast<std::byte*>(recv);
    int rc = MPI_SUCCESS;
    for (std::size_t at = 0; at < count; at += per) {
      const std::size_t m = std::min(per, count - at);
      s.hier_shm.reduce(r.body, r.size, from + at * r.size, s.hier_scratch.data(), m, local_root);
      if (s.node_rank == local_root && rc == MPI_SUCCESS) {
        rc = MPI_Reduce(s.hier_scratch.data(), at_root ? to + at * r.size : nullptr, static_cast<int>(m),
                        r.datatype(), op, cross_root, s.cross_comm);
      }
    }
    if (rc != MPI_SUCCESS) [[unlikely]] return mpi_error(c, rc, "MPI_Reduce (the hierarchical reduce, across nodes)");
    if (at_root && r.avg()) r.divide(recv, count, s.size);
    done = true;
    return {};
  }

  // ------------------------------------------------------------ reproducible reductions

  // Options::reproducible: true when this reduction is folded here in rank
  // order (backends/mpi/ordered.hpp) instead of by MPI or the 2-rank
  // algorithms: at 3 or more ranks, for the pairs whose bits depend on the
  // order (floating and complex sums, products, averages). At 2 a reduction
  // is one binary step per element, and IEEE sum and product commute, so
  // every path already gives the rank-order result; but not a complex
  // product, whose imaginary part ar*bi + ai*br a compiler may contract into
  // an FMA (GCC's default for C++, and clang's within an expression), which
  // rounds differently with the operands swapped, as the 2-rank algorithms
  // and MPI's user op may swap them: those take the rank-order path at 2 too.
  bool ordered(const detail::mpi::Reduction& r) const noexcept {
    return r.order_matters && state_->options.reproducible && state_->size >= (r.complex_prod ? 2u : 3u);
  }

  [[gnu::cold]] Status ordered_out_of_memory(const detail::CallDesc& c) const {
    return tl::unexpected(
        this->error(Errc::backend_failure, c, "out of memory (the reproducible reduction's scratch)"));
  }

  // The communicator's reused scratch of at least `bytes` (lock held), or
  // nullptr when out of memory. Never empty, so that nullptr means only that.
  std::byte* ordered_scratch(std::size_t bytes) noexcept {
    bytes = bytes == 0 ? 1 : bytes;
    try {
      if (state_->ordered_scratch.size() < bytes) state_->ordered_scratch.resize(bytes);
      return state_->ordered_scratch.data();
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }

  // A reproducible reduction that is one MPI collective into `bytes` of
  // scratch (`post(scratch, request)`; request null: the blocking form)
  // followed, where `fold`, by the rank-order fold of the scratch's p
  // contributions of `count` elements into `recv`. Blocking, it uses the
  // communicator's scratch and folds at once. Under the nonblocking policy or
  // with op_timeout it is posted like every other collective: the scratch is
  // the call's own, kept by the request, and the fold is its finish, so a
  // call that times out stays one posted collective that a later sync()
  // completes, result included. Every allocation comes before the MPI call,
  // so running out of memory fails the call on this rank before any message.
  template <class Post>
  Status ordered_one(const detail::mpi::Reduction& r, const detail::CallDesc& c, void* recv, std::size_t count,
                     std::size_t bytes, bool fold, const char* blocking_fn, const char* nonblocking_fn,
                     const std::optional<detail::Clock::time_point>& dl, Post&& post) {
    const MPI_Datatype dt = r.datatype();
    if (!nonblocking && !dl) {
      std::byte* scratch = ordered_scratch(bytes);
      if (scratch == nullptr) return ordered_out_of_memory(c);
      if (const int rc = post(scratch, nullptr); rc != MPI_SUCCESS) return mpi_error(c, rc, blocking_fn);
      if (fold) r.fold(recv, scratch, count, state_->size, count);
      return {};
    }
    std::unique_ptr<std::byte[]> owned(new (std::nothrow) std::byte[bytes == 0 ? 1 : bytes]);
    if (!owned) return ordered_out_of_memory(c);
    MPI_Request req = MPI_REQUEST_NULL;
    if (const int rc = post(owned.get(), &req); rc != MPI_SUCCESS) return mpi_error(c, rc, nonblocking_fn);
    detail::mpi::Finish f;
    if (fold) f = {r.fold_finish, recv, owned.get(), count, state_->size};
    return posted(req, c, dt, f, nonblocking_fn, dl, std::move(owned));
  }

  // all_reduce (`all`) or reduce to `root` of `count` elements from `send`
  // into `recv` (they may be equal), folded in rank order. Lock held,
  // consistency check done.
  Status ordered_reduce(const detail::mpi::Reduction& r, const detail::CallDesc& c, const void* send, void* recv,
                        std::size_t count, bool all, std::size_t root,
                        const std::optional<detail::Clock::time_point>& dl) {
    const std::size_t p = state_->size, me = state_->rank;
    const std::size_t es = r.size;
    const bool gets_result = all || me == root;
    const MPI_Datatype dt = r.datatype();
    const MPI_Comm comm = state_->comm;
    const int n = static_cast<int>(count), rt = static_cast<int>(root);
    if (nonblocking || dl || count * es <= detail::mpi::ordered_gather_to_bytes / p) {
      // Every rank's whole buffer, then the whole fold where the result goes.
      const std::size_t bytes = gets_result ? p * count * es : 0;
      return ordered_one(r, c, recv, count, bytes, gets_result, all ? "MPI_Allgather" : "MPI_Gather",
                                all ? "MPI_Iallgather" : "MPI_Igather", dl,
                                [&](std::byte* scratch, MPI_Request* req) {
                                  if (all) {
                                    return req ? MPI_Iallgather(send, n, dt, scratch, n, dt, comm, req)
                                               : MPI_Allgather(send, n, dt, scratch, n, dt, comm);
                                  }
                                  return req ? MPI_Igather(send, n, dt, scratch, n, dt, rt, comm, req)
                                             : MPI_Gather(send, n, dt, scratch, n, dt, rt, comm);
                                });
    }
    // Blocking and large: rank q receives block q of every rank's buffer
    // (MPI_Alltoallv) and folds it; the folded blocks, padded to one length,
    // are gathered with MPI_Allgather / MPI_Gather and copied into recv. (Not
    // MPI_Allgatherv: MPICH 4.0's took about 100 times as long as its
    // MPI_Allgather of the same bytes at 3 ranks; docs/benchmarks.md,
    // "Reproducible reductions".) Everything is allocated before the first
    // collective, and the fold cannot fail, so the ranks never part ways
    // between the two.
    const std::size_t len = detail::mpi::block_length(count, p);
    if (p * len > static_cast<std::size_t>(INT_MAX)) [[unlikely]] {
      return tl::unexpected(this->error(Errc::unsupported, c,
                                        "the reproducible reduction's blocks exceed INT_MAX, the largest MPI-3 count"));
    }
    const detail::mpi::Block mine = detail::mpi::block_of(count, p, me);
    // p blocks of len (this rank's block of every rank), the folded block,
    // and where the result goes the p folded blocks.
    const std::size_t elems = (p + 1) * len + (gets_result ? p * len : 0);
    std::byte* const blocks = ordered_scratch(elems * es);
    if (blocks == nullptr) return ordered_out_of_memory(c);
    std::byte* const folded = blocks + p * len * es;
    std::byte* const gathered = folded + len * es;
    auto& v = state_->v_ints;  // send counts, send displacements, receive counts, receive displacements
    try {
      v.resize(4 * p);
    } catch (const std::bad_alloc&) {
      return ordered_out_of_memory(c);
    }
    for (std::size_t q = 0; q < p; ++q) {
      const detail::mpi::Block b = detail::mpi::block_of(count, p, q);
      v[q] = static_cast<int>(b.len);
      v[p + q] = static_cast<int>(b.lo);
      v[2 * p + q] = static_cast<int>(mine.len);
      v[3 * p + q] = static_cast<int>(q * len);
    }
    int rc = MPI_Alltoallv(send, v.data(), v.data() + p, dt, blocks, v.data() + 2 * p, v.data() + 3 * p, dt, comm);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Alltoallv");
    r.fold(folded, blocks, len, p, mine.len);
    const int ln = static_cast<int>(len);
    rc = all ? MPI_Allgather(folded, ln, dt, gathered, ln, dt, comm)
             : MPI_Gather(folded, ln, dt, gathered, ln, dt, rt, comm);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, all ? "MPI_Allgather" : "MPI_Gather");
    if (gets_result) std::memcpy(recv, gathered, count * es);
    return {};
  }

  // reduce_scatter of `count` elements per rank, folded in rank order: block
  // q of every rank's send to rank q (MPI_Alltoall), then each rank folds its
  // p blocks. Lock held, check done.
  Status ordered_reduce_scatter(const detail::mpi::Reduction& r, const detail::CallDesc& c, const void* send,
                                void* recv, std::size_t count, const std::optional<detail::Clock::time_point>& dl) {
    const MPI_Datatype dt = r.datatype();
    const MPI_Comm comm = state_->comm;
    const int n = static_cast<int>(count);
    return ordered_one(r, c, recv, count, state_->size * count * r.size, true, "MPI_Alltoall", "MPI_Ialltoall", dl,
                       [&](std::byte* scratch, MPI_Request* req) {
                         return req ? MPI_Ialltoall(send, n, dt, scratch, n, dt, comm, req)
                                    : MPI_Alltoall(send, n, dt, scratch, n, dt, comm);
                       });
  }

  Status reduce_scatter_into(const detail::mpi::Reduction& r, const void* send, void* recv, std::size_t count);
  Status reduce_into(const detail::mpi::Reduction& r, const void* send, void* recv, std::size_t count,
                     std::size_t root);

  template <DType D, ReduceOp Op, class T>
  Status reduce_scatter_impl([[maybe_unused]] dtype_tag<D> d, op_tag<Op>, const T* send, T* recv, std::size_t count);

  template <DType D, class T>
  Status broadcast_impl(dtype_tag<D>, T* buf, std::size_t count, std::size_t root);

  template <DType D, class T>
  Status all_gather_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count);

  template <DType D, ReduceOp Op, class T>
  Status reduce_impl([[maybe_unused]] dtype_tag<D> d, op_tag<Op>, const T* send, T* recv, std::size_t count,
                     std::size_t root);

  template <DType D, class T>
  Status gather_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count, std::size_t root);

  template <DType D, class T>
  Status scatter_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count, std::size_t root);

  template <DType D, class T>
  Status all_to_all_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count);

  // The skeleton of the fixed-count collectives: under the submission lock,
  // after the consistency check, `call(&req)` posts the MPI_I* form under the
  // nonblocking policy or with op_timeout set, and `finish` runs when that
  // request completes (sync(), or the wait for the deadline); otherwise
  // `call(nullptr)` makes the blocking call and `finish` runs at once. Errors
  // name the MPI function that failed. all_reduce and reduce_scatter, which
  // choose among algorithms and scratch blocks under the same lock, and the
  // v-collectives, which block under both policies, spell their variants out.
  template <class F>
  Status collective(const detail::CallDesc& c, MPI_Datatype dt, const char* blocking_fn, const char* nonblocking_fn,
                    F&& call, const detail::mpi::Finish& finish = {}) {
    return collective(c, dt, blocking_fn, nonblocking_fn, std::forward<F>(call), finish, 0, nullptr);
  }
  // The same, for a collective the node window may serve: `window_bytes` of
  // each rank's buffer set (0: never), `window(fp)` the window's call, and
  // `across(done)` the hierarchical path's, where it has one
  // (through_node_window).
  template <class F, class W, class A = std::nullptr_t>
  Status collective(const detail::CallDesc& c, MPI_Datatype dt, const char* blocking_fn, const char* nonblocking_fn,
                    F&& call, const detail::mpi::Finish& finish, std::size_t window_bytes, W&& window,
                    A&& across = nullptr) {
    const auto dl = deadline();
    auto guard = lock();
    if constexpr (!std::is_same_v<std::decay_t<W>, std::nullptr_t>) {
      if (auto s = through_node_window(c, dl, window_bytes, window, across)) return std::move(*s);
    } else {
      if (auto s = preflight(c, dl); !s) return s;
    }
    if (nonblocking || dl) {
      MPI_Request req = MPI_REQUEST_NULL;
      if (const int rc = call(&req); rc != MPI_SUCCESS) return mpi_error(c, rc, nonblocking_fn);
      return posted(req, c, dt, finish, nonblocking_fn, dl);
    }
    if (const int rc = call(nullptr); rc != MPI_SUCCESS) return mpi_error(c, rc, blocking_fn);
    finish.run();
    return {};
  }

  // A collective the node window may serve: 2 or more ranks all on one node,
  // blocking, no op_timeout, 0 < `bytes` <= node_shm_to_bytes(p) in each
  // rank's buffer set. The consistency check first: riding the window's
  // line when the window already holds `bytes` (at 3 or more ranks: at 2
  // the 2-rank window's line carries every call's check, so that an
  // all_reduce there and a mismatched call here meet in one line), else
  // preflight(). Then
  // `run(fp)` through the window (fp null without a riding check; false on
  // a mismatch). Lock held. Returns the call's Status when it is over
  // (served, or failed), nullopt when the caller goes on through MPI (the
  // check done). Every rank decides alike: the conditions are the call's,
  // and the window's state changes only in calls all ranks make together.
  // With `across` (broadcast and reduce), the hierarchical path comes first
  // where it serves (decided when pair_comm is made, which a blocking call
  // without op_timeout does at 2 or more ranks; docs/mpi.md, "Across
  // nodes"): `across(done)` runs the call, `done` false when it could not
  // (the caller goes on as if it had never served). No check rides a call
  // it may take.
  template <class Run, class Across = std::nullptr_t>
  std::optional<Status> through_node_window(const detail::CallDesc& c,
                                            const std::optional<detail::Clock::time_point>& dl, std::size_t bytes,
                                            Run&& run, Across&& across = nullptr) {
    constexpr bool crosses = !std::is_same_v<std::decay_t<Across>, std::nullptr_t>;
    const bool may_cross = crosses && !nonblocking && !dl && state_->size >= 2 && bytes != 0 &&
                           (state_->pair_comm == MPI_COMM_NULL || state_->hierarchical());
    const bool eligible = !nonblocking && !dl && state_->size >= 2 && bytes != 0 &&
                          bytes <= detail::mpi::node_shm_to_bytes(state_->size) && !state_->node_shm.refused();
    // (The caller's own choice, when it goes on: "mpi" or, after it, "rank order".)
    state_->last_algorithm = "none";
    const auto elsewhere = [this]() -> std::optional<Status> {
      state_->last_algorithm = "mpi";
      return std::nullopt;
    };
    std::optional<detail::CallDesc> rides;
    if (eligible && !may_cross && state_->size >= 3 && state_->check && window_checks(dl) &&
        state_->node_shm.fits(bytes, 1)) {
      entering(c);
      if (auto s = room(c); !s) return s;
      rides = checked(c);
    } else if (auto s = preflight(c, dl); !s) {
      return s;
    }
    if (!eligible && !may_cross) return elsewhere();
    // (After the check, as in all_reduce_into.)
    if (state_->pair_comm == MPI_COMM_NULL) {
      if (auto s = make_pair_comm(c); !s) return s;
    }
    if constexpr (crosses) {
      if (may_cross && state_->hierarchical()) {
        bool done = false;
        state_->last_algorithm = "hierarchical";
        if (Status s = across(done); !s || done) return s;
      }
    }
    if (!eligible) return elsewhere();
    const int rc = state_->node_shm.ensure(state_->pair_comm, state_->rank, state_->size, bytes, 1);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Comm_split_type/MPI_Win_allocate_shared (node window)");
    if (!state_->node_shm.ready()) return elsewhere();
    if (rides) {
      const detail::PackedFingerprint fp = detail::pack_fingerprint(*rides);
      if (!run(&fp)) [[unlikely]] return mismatch_detail(*rides, dl, true);
    } else {
      run(static_cast<const detail::PackedFingerprint*>(nullptr));
    }
    state_->last_algorithm = "node window";
    return Status{};
  }

  // The v-collectives' counts and displacements as the ints MPI-3 takes, in
  // state_->v_ints (lock held): `layouts` blocks of world_size counts, then
  // displacements. Errc::unsupported past INT_MAX.
  Status to_ints(const detail::CallDesc& c, std::initializer_list<const detail::VLayout*> layouts) {
    const std::size_t w = state_->size;
    auto& v = state_->v_ints;
    try {
      v.resize(2 * w * layouts.size());
    } catch (const std::bad_alloc&) {
      return tl::unexpected(this->error(Errc::backend_failure, c, "out of memory"));
    }
    std::size_t k = 0;
    bool too_big = false;
    for (const detail::VLayout* l : layouts) {
      l->each([&](std::size_t q, std::size_t cnt, std::size_t displ) {
        too_big = too_big || cnt > static_cast<std::size_t>(INT_MAX) || displ > static_cast<std::size_t>(INT_MAX);
        v[k + q] = static_cast<int>(cnt);
        v[k + w + q] = static_cast<int>(displ);
      });
      k += 2 * w;
    }
    if (too_big) {
      return tl::unexpected(this->error(Errc::unsupported, c,
                                        "a count or displacement exceeds INT_MAX, the largest MPI-3 count"));
    }
    return {};
  }

  // The v-collectives are blocking under both completion policies: MPI must
  // keep their count arrays until completion, which a reused buffer cannot
  // promise to a posted request (see docs/mpi.md). With op_timeout set they
  // are MPI_I* calls awaited here; one that times out takes its arrays along
  // (state_->retired_ints) until a sync() completes it.
  template <DType D, class T>
  Status all_gather_v_impl(dtype_tag<D>, const T* send, std::size_t send_count, T* recv,
                           const detail::VLayout& layout);

  template <DType D, class T>
  Status all_to_all_v_impl(dtype_tag<D>, const T* send, const detail::VLayout& sl, T* recv,
                           const detail::VLayout& rl);

  // await() for a v-collective: on a timeout its count arrays are retired
  // with it, so the next v-collective does not overwrite what MPI still reads.
  Status await_v(MPI_Request& req, const detail::CallDesc& c, MPI_Datatype dt, const char* fn,
                 const std::optional<detail::Clock::time_point>& dl) {
    auto done = await(req, numbered(c), dt, {}, fn, dl);
    if (!done) {
      try {
        state_->retired_ints.push_back(std::move(state_->v_ints));
        state_->v_ints = {};
      } catch (const std::bad_alloc&) {
        // The arrays stay where they are; nothing better is possible.
      }
    }
    return done;
  }

  // Isend and the matched receives are posted as they are submitted and
  // completed together by sync(): the request pool already is the batch.
  Status group_start_impl();
  Status group_end_impl();

  // ------------------------------------------------------------ point to point

  // A tag MPI accepts; any_tag (recv and probe only, the front end checked)
  // becomes MPI_ANY_TAG.
  Status check_tag(const detail::CallDesc& c, std::uint32_t tag) const {
    if (tag > state_->tag_ub && tag != any_tag) [[unlikely]] {
      return tl::unexpected(this->error(Errc::invalid_argument, c,
                                        detail::cat("tag ", tag, " exceeds MPI_TAG_UB (", state_->tag_ub,
                                                    ") of this MPI")));
    }
    return {};
  }

  template <DType D, class T>
  Status send_impl(dtype_tag<D>, const T* ptr, std::size_t count, std::size_t dest, std::uint32_t tag);

  template <DType D, class T>
  Status recv_impl(dtype_tag<D>, T* ptr, std::size_t count, std::size_t src, std::uint32_t tag);

  // ------------------------------------------------------------ completion

  // The Error of a request that completed with `code` (its status in `st`).
  Error request_error(const detail::mpi::Pending& p, const MPI_Status& st, int code) const {
    const std::string native = detail::mpi::error_text(code);
    if (detail::mpi::errc_of(code) == Errc::truncated && p.call.call == detail::Call::recv) {
      int got = MPI_UNDEFINED;
      MPI_Get_count(&st, p.datatype, &got);
      std::string sent = got != MPI_UNDEFINED && got >= 0 && static_cast<std::size_t>(got) > p.call.count
                             ? detail::cat(got, " elements")
                             : detail::cat("more than ", p.call.count, " elements");
      return this->error(Errc::truncated, p.call,
                         detail::cat("message truncated: rank ", p.call.peer, " sent ", sent, " with tag ", p.call.tag,
                                     ", recv posted for ", p.call.count, " elements (", native, ')'),
                         code);
    }
    return this->error(detail::mpi::errc_of(code), p.call, native, code);
  }

  // Tries to match unmatched receive i with MPI_Improbe; on a match posts
  // MPI_Imrecv into the caller's buffer, or, for a message larger than the
  // buffer, receives it into a scratch buffer (error path only) and records
  // Errc::truncated. Returns true when the entry made progress.
  bool try_match(std::size_t i, std::optional<Error>& first) {
    auto& pool = state_->pool;
    detail::mpi::Pending& p = pool.pending(i);
    int flag = 0;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status st{};
    int src = mpi_source(p.call.peer), tag = mpi_tag(p.call.tag);
    int rc = MPI_SUCCESS;
    if (overlaps_earlier(i)) {
      // An earlier unmatched receive with an overlapping pattern (a wildcard
      // on either side) comes first in MPI's order: look at the message this
      // one would take without taking it, and leave it to the earlier one if
      // that one matches it too; else take exactly that message.
      rc = MPI_Iprobe(src, tag, state_->comm, &flag, &st);
      if (rc == MPI_SUCCESS) {
        if (!flag) return false;
        if (taken_by_earlier(i, static_cast<std::size_t>(st.MPI_SOURCE), static_cast<std::uint32_t>(st.MPI_TAG))) {
          return false;
        }
        src = st.MPI_SOURCE;
        tag = st.MPI_TAG;
      }
    }
    if (rc == MPI_SUCCESS) rc = MPI_Improbe(src, tag, state_->comm, &flag, &msg, &st);
    if (rc != MPI_SUCCESS) {
      if (!first) first = request_error(p, st, rc);
      p.unmatched = false;
      return true;
    }
    if (!flag) return false;
    p.unmatched = false;
    int bytes = 0;
    MPI_Get_count(&st, MPI_BYTE, &bytes);
    const std::size_t posted = p.call.count * size_of(p.call.dtype);
    if (bytes >= 0 && static_cast<std::size_t>(bytes) > posted) {
      drop(msg, bytes);
      if (!first) {
        const std::size_t elem = size_of(p.call.dtype);
        const std::string sent = static_cast<std::size_t>(bytes) % elem == 0
                                     ? detail::cat(static_cast<std::size_t>(bytes) / elem, " elements")
                                     : detail::cat(bytes, " bytes");
        first = this->error(Errc::truncated, p.call,
                            detail::cat("message truncated: rank ", st.MPI_SOURCE, " sent ", sent, " with tag ",
                                        st.MPI_TAG, ", recv posted for ", p.call.count,
                                        " elements (MPI_ERR_TRUNCATE avoided: the message was probed and dropped)"),
                            MPI_ERR_TRUNCATE);
      }
      return true;
    }
    rc = MPI_Imrecv(p.recv_buf, static_cast<int>(p.call.count), p.datatype, &msg, &pool.request(i));
    if (rc != MPI_SUCCESS && !first) first = request_error(p, st, rc);
    return true;
  }

  // Receives matched message `msg` of `bytes` bytes into a scratch buffer and
  // drops it (an error path: the message is not the receive's to keep).
  static void drop(MPI_Message& msg, int bytes) noexcept {
    try {
      std::vector<std::byte> sink(static_cast<std::size_t>(std::max(bytes, 0)));
      MPI_Mrecv(sink.data(), bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
    } catch (const std::bad_alloc&) {
      MPI_Mrecv(nullptr, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);  // truncates on purpose: the data is dropped
    }
  }

  // polycoll's wildcards as MPI's. Ranks and tags that reach here were
  // checked: a rank below the world size, a tag up to MPI_TAG_UB.
  static int mpi_source(std::size_t src) noexcept {
    return src == any_source ? MPI_ANY_SOURCE : static_cast<int>(src);
  }
  static int mpi_tag(std::uint32_t tag) noexcept { return tag == any_tag ? MPI_ANY_TAG : static_cast<int>(tag); }

  // True when an earlier unmatched receive could take a message receive i
  // could take (equal patterns, or a wildcard on either side).
  bool overlaps_earlier(std::size_t i) const noexcept {
    const auto& pool = state_->pool;
    const detail::CallDesc& p = pool.pending(i).call;
    for (std::size_t j = 0; j < i; ++j) {
      const auto& q = pool.pending(j);
      if (!q.unmatched) continue;
      const bool src = q.call.peer == p.peer || q.call.peer == any_source || p.peer == any_source;
      const bool tag = q.call.tag == p.tag || q.call.tag == any_tag || p.tag == any_tag;
      if (src && tag) return true;
    }
    return false;
  }

  // True when an unmatched receive before i matches a message from (src, tag).
  bool taken_by_earlier(std::size_t i, std::size_t src, std::uint32_t tag) const noexcept {
    const auto& pool = state_->pool;
    for (std::size_t j = 0; j < i; ++j) {
      const auto& q = pool.pending(j);
      if (q.unmatched && (q.call.peer == any_source || q.call.peer == src) &&
          (q.call.tag == any_tag || q.call.tag == tag)) {
        return true;
      }
    }
    return false;
  }

  // The first pending message a receive from (src, tag) posted now would
  // take (MPI_Iprobe). The receives already posted come first in MPI's order,
  // so they are matched before, and a message one of them still waits for is
  // theirs (matched again, then probed again).
  Result<std::optional<detail::Envelope>> probe_impl(std::size_t src, std::uint32_t tag);

  // True when an entry before unmatched receive i waits for the same (src, tag).
  bool blocked_by_earlier(std::size_t i) const noexcept {
    const auto& pool = state_->pool;
    const detail::mpi::Pending& p = pool.pending(i);
    for (std::size_t j = 0; j < i; ++j) {
      const auto& q = pool.pending(j);
      if (q.unmatched && q.call.peer == p.call.peer && q.call.tag == p.call.tag) return true;
    }
    return false;
  }

  // Matches what can be matched, keeping MPI's order: a receive is not probed
  // while an earlier one with the same (src, tag) is still unmatched.
  // Returns {progressed, any left unmatched}.
  std::pair<bool, bool> match_receives(std::optional<Error>& first) {
    auto& pool = state_->pool;
    bool progressed = false, left = false;
    for (std::size_t i = 0; i < pool.size(); ++i) {
      if (!pool.pending(i).unmatched) continue;
      if (!blocked_by_earlier(i) && try_match(i, first)) {
        progressed = true;
      } else {
        left = true;
      }
    }
    return {progressed, left};
  }

  // Request i completed with `rc` (MPI freed it): run its finish or keep the
  // first error.
  void settle(std::size_t i, int rc, const MPI_Status& st, std::optional<Error>& first) {
    auto& pool = state_->pool;
    if (rc == MPI_SUCCESS) {
      pool.pending(i).finish.run();
    } else if (!first) {
      first = request_error(pool.pending(i), st, rc);
    }
    pool.request(i) = MPI_REQUEST_NULL;
  }

  // One polling pass over every pending operation: match receives, test
  // requests (MPI_Test one at a time, never MPI_Testall/Testsome/Waitall,
  // whose errors MPICH raises on MPI_COMM_WORLD's handler). Lock held.
  bool poll_once(std::optional<Error>& first) {
    auto& pool = state_->pool;
    bool progressed = match_receives(first).first;
    for (std::size_t i = 0; i < pool.size(); ++i) {
      if (pool.request(i) == MPI_REQUEST_NULL) continue;
      MPI_Status st{};
      int flag = 0;
      const int rc = MPI_Test(&pool.request(i), &flag, &st);
      if (rc != MPI_SUCCESS || flag) {
        settle(i, rc, st, first);
        progressed = true;
      }
    }
    pool.compact();
    return progressed;
  }

  // True while an operation numbered <= upto is pending.
  bool pending_upto(std::uint64_t upto) const noexcept {
    const auto& pool = state_->pool;
    for (std::size_t i = 0; i < pool.size(); ++i) {
      if (pool.pending(i).call.seq <= upto) return true;
    }
    return false;
  }

  // Polls until every operation numbered <= upto has completed (true) or the
  // deadline passes (false). The lock is released between passes, so other
  // threads keep submitting (and may be what the awaited receives wait for).
  bool drain(const std::optional<detail::Clock::time_point>& deadline, std::uint64_t upto,
             Guard& guard, std::optional<Error>& first);

  // sync()'s and barrier()'s completion of everything posted before it,
  // bounded by op_timeout. Lock held (released while polling).
  // `collective`: the caller (barrier) posted its own collective last, so a
  // timeout's message says who has not entered it (missing_text).
  Status complete(const detail::CallDesc& c, Guard& guard,
                  const std::optional<detail::Clock::time_point>& dl, bool collective = false) {
    std::optional<Error> first = std::exchange(state_->deferred, std::nullopt);
    // The sends this sync completes: those recorded before drain() lets go of the lock.
    const std::uint64_t sends_before = state_->check ? state_->ledger.mark() : 0;
    bool done = true;
    if (!state_->pool.empty()) done = drain(dl, state_->seq, guard, first);
    std::optional<detail::CallDesc> changed;
    if (state_->pool.empty()) {
      // Every timed-out collective has completed: MPI is done with their buffers.
      state_->retired_x.clear();
      state_->retired_ints.clear();
      if (!state_->deferred) state_->pool.mark_idle();
    }
    // Every send posted before this sync() completed (drain returned done, the
    // pool may still hold later work of other threads): with the check on,
    // none of their buffers may have changed since it was posted. Checked
    // here, not only once the pool is empty, so that a receive kept posted
    // (a wildcard service loop) neither lets the records pile up nor leaves
    // them to be hashed after their buffers were reused or freed.
    if (done && state_->check) [[unlikely]] changed = state_->ledger.verify(sends_before);
    if (first) return tl::unexpected(std::move(*first));
    if (changed) return tl::unexpected(this->error(Errc::mismatch, *changed, detail::send_changed_text));
    if (!done) {
      return tl::unexpected(this->error(
          Errc::timeout, c,
          detail::cat("timed out after ", state_->options.op_timeout->count(), " ms",
                      collective ? missing_text() : std::string(), "; pending: ", pending_text(),
                      "; they stay posted: a later sync() can still complete them")));
    }
    return {};
  }

  std::string pending_text() const {
    std::string s;
    const auto& pool = state_->pool;
    for (std::size_t i = 0; i < pool.size(); ++i) {
      if (!s.empty()) s += ", ";
      s += detail::describe(pool.pending(i).call);
    }
    return s.empty() ? std::string("none") : s;
  }

  Status sync_impl();

  Status barrier_impl();

  // ------------------------------------------------------------ split

  Result<std::optional<BasicMpi>> split_impl(std::uint32_t color, std::uint32_t key);

  // ------------------------------------------------------------ teardown

  // The drop contract: wait at most drop_timeout for pending requests, then
  // log them, cancel the receives, free what MPI lets us free, and release
  // the communicator. Never throws, never blocks past the bound (MPI_Cancel
  // of a receive completes locally).
  void release() noexcept;

  std::unique_ptr<State> state_;
};

template <class Policies>
Result<BasicMpi<Policies>> BasicMpi<Policies>::make(const char* what, MPI_Comm comm, Mode mode, const Options& options) {
  if (auto st = detail::check_on_error_environment(detail::cat(what, " [mpi]")); !st)
    return tl::unexpected(std::move(st.error()));
  if (!detail::mpi::mpi_usable()) {
    int init = 0;
    MPI_Initialized(&init);
    return fail(Errc::not_initialized,
                init ? detail::cat(what, " [mpi]: MPI has been finalized")
                     : detail::cat(what, " [mpi]: MPI is not initialised (create a polycoll::mpi::Environment "
                                         "or call MPI_Init_thread first)"));
  }
  if (comm == MPI_COMM_NULL) return fail(Errc::invalid_argument, detail::cat(what, " [mpi]: MPI_COMM_NULL"));
  if (const int rc = detail::mpi::install_hook(); rc != MPI_SUCCESS) {
    return fail(detail::mpi::errc_of(rc), detail::cat(what, " [mpi]: ", detail::mpi::error_text(rc)), rc);
  }
  std::unique_ptr<State> s;
  try {
    s = std::make_unique<State>();
  } catch (const std::bad_alloc&) {
    return fail(Errc::backend_failure, detail::cat(what, " [mpi]: out of memory"));
  }
  s->options = detail::with_environment(options);
  s->forced_local = detail::mpi::forced_all_reduce_from_environment();
  if (s->forced_local == detail::mpi::ForcedAllReduce::invalid) s->forced_text = std::getenv("POLYCOLL_MPI_ALL_REDUCE");
  s->fake_node_local = detail::mpi::fake_node_size_from_environment();
  if (s->fake_node_local < 0) s->fake_node_text = std::getenv("POLYCOLL_MPI_NODE_SIZE");
  try {
    s->flight = detail::FlightRecorder::make(s->options.flight_record_size);
  } catch (const std::bad_alloc&) {
    return fail(Errc::backend_failure, detail::cat(what, " [mpi]: out of memory for the flight record"));
  }
  int rc = MPI_SUCCESS;
  if (mode == Mode::borrow) {
    // Errors on the caller's comm must come back to us, not abort.
    rc = MPI_Comm_get_errhandler(comm, &s->saved);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
      if (s->saved != MPI_ERRHANDLER_NULL) MPI_Errhandler_free(&s->saved);
      return fail(detail::mpi::errc_of(rc), detail::cat(what, " [mpi]: ", detail::mpi::error_text(rc)), rc);
    }
    s->comm = comm;
  } else if (mode == Mode::duplicate) {
    // MPI_Comm_dup inherits the handler; a fatal one would abort on a bad
    // argument, so set ERRORS_RETURN on the source only for the call.
    MPI_Errhandler old = MPI_ERRHANDLER_NULL;
    MPI_Comm_get_errhandler(comm, &old);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    rc = MPI_Comm_dup(comm, &s->comm);
    if (old != MPI_ERRHANDLER_NULL) {
      MPI_Comm_set_errhandler(comm, old);
      MPI_Errhandler_free(&old);
    }
    if (rc != MPI_SUCCESS) {
      return fail(detail::mpi::errc_of(rc), detail::cat(what, " [mpi]: MPI_Comm_dup: ", detail::mpi::error_text(rc)),
                  rc);
    }
    s->owned = true;
  } else {
    s->comm = comm;
    s->owned = true;
  }
  if (s->owned) MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
  int r = 0, n = 1;
  MPI_Comm_rank(s->comm, &r);
  MPI_Comm_size(s->comm, &n);
  s->rank = static_cast<std::size_t>(r);
  s->size = static_cast<std::size_t>(n);
  int flag = 0;
  int* ub = nullptr;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  if (flag && ub) s->tag_ub = static_cast<std::uint32_t>(*ub);
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  s->serialized = provided < MPI_THREAD_MULTIPLE;
  s->check = options.check_consistency || detail::check_from_environment();
  if (s->check) {
    try {
      s->xbuf.resize(fp_words * (s->size + 1));
    } catch (const std::bad_alloc&) {
      if (s->owned) {
        MPI_Comm_free(&s->comm);
      } else if (s->saved != MPI_ERRHANDLER_NULL) {
        MPI_Comm_set_errhandler(s->comm, s->saved);
        MPI_Errhandler_free(&s->saved);
      }
      return fail(Errc::backend_failure, detail::cat(what, " [mpi]: out of memory"));
    }
  }
  // The status board, with op_timeout (its only reader is a timeout), where
  // making the communicator is collective anyway; a board that cannot be
  // made only leaves the timeout's message without it.
  if (s->options.op_timeout && mode != Mode::borrow) (void)s->board.create(s->comm);
  return BasicMpi(std::move(s));
}

template <class Policies>
Status BasicMpi<Policies>::group_start_impl() {
  const auto c = detail::CallDesc::plain(detail::Call::group_start);
  if (!live(0)) [[unlikely]] return enter(c, 0);
  auto guard = lock();
  ++state_->groups;
  return {};
}

template <class Policies>
Status BasicMpi<Policies>::group_end_impl() {
  const auto c = detail::CallDesc::plain(detail::Call::group_end);
  if (!live(0)) [[unlikely]] return enter(c, 0);
  auto guard = lock();
  if (state_->groups == 0) {
    return tl::unexpected(this->error(Errc::invalid_argument, c, "no open group (group_end without group_start)"));
  }
  --state_->groups;
  return {};
}

template <class Policies>
Result<std::optional<detail::Envelope>> BasicMpi<Policies>::probe_impl(std::size_t src, std::uint32_t tag) {
  const auto c = detail::CallDesc::p2p(detail::Call::probe, detail::npos, DType::U8, src, tag);
  if (!live(0)) [[unlikely]] return tl::unexpected(enter(c, 0).error());
  if (auto s = check_tag(c, tag); !s) return tl::unexpected(std::move(s.error()));
  auto guard = lock();
  for (;;) {
    std::optional<Error> first;
    (void)match_receives(first);  // an error stays for the next sync(), as recv's does
    if (first && !state_->deferred) state_->deferred = std::move(first);
    state_->pool.compact();
    int flag = 0;
    MPI_Status st{};
    const int rc = MPI_Iprobe(mpi_source(src), mpi_tag(tag), state_->comm, &flag, &st);
    if (rc != MPI_SUCCESS) return tl::unexpected(mpi_error(c, rc, "MPI_Iprobe").error());
    if (!flag) return std::optional<detail::Envelope>{};
    const auto from = static_cast<std::size_t>(st.MPI_SOURCE);
    const auto with = static_cast<std::uint32_t>(st.MPI_TAG);
    // Each pass matches at least the first unmatched receive that takes it, so this ends.
    if (taken_by_earlier(state_->pool.size(), from, with)) continue;
    int bytes = 0;
    MPI_Get_count(&st, MPI_BYTE, &bytes);
    return std::optional<detail::Envelope>{detail::Envelope{from, with, static_cast<std::size_t>(std::max(bytes, 0))}};
  }
}

template <class Policies>
bool BasicMpi<Policies>::drain(const std::optional<detail::Clock::time_point>& deadline, std::uint64_t upto,
           Guard& guard, std::optional<Error>& first) {
  unsigned idle = 0;
  for (;;) {
    const bool progressed = poll_once(first);
    if (!pending_upto(upto)) return true;
    if (deadline && detail::Clock::now() >= *deadline) return false;
    guard.unlock();
    if (progressed) {
      idle = 0;
    } else {
      detail::mpi::back_off(idle);
    }
    guard.lock();
  }
}

template <class Policies>
Status BasicMpi<Policies>::sync_impl() {
  const auto c = detail::CallDesc::plain(detail::Call::sync);
  if (!live(0)) [[unlikely]] return enter(c, 0);
  // Nothing posted since the last complete sync (blocking collectives post
  // nothing): no lock, no polling. Measured in docs/mpi.md.
  if (!state_->pool.busy()) [[likely]] return {};
  const auto dl = deadline();
  auto guard = lock();
  return complete(c, guard, dl);
}

template <class Policies>
Status BasicMpi<Policies>::barrier_impl() {
  const auto c = detail::CallDesc::plain(detail::Call::barrier);
  if (!live(0)) [[unlikely]] return enter(c, 0);
  const auto dl = deadline();
  auto guard = lock();
  if (auto s = complete(c, guard, dl); !s) return s;
  if (auto s = preflight(c, dl); !s) return s;
  if (!state_->options.op_timeout) {
    const int rc = MPI_Barrier(state_->comm);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Barrier");
    return {};
  }
  // Bounded: an MPI_Ibarrier completed by the same polling loop.
  MPI_Request req = MPI_REQUEST_NULL;
  const int rc = MPI_Ibarrier(state_->comm, &req);
  if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Ibarrier");
  state_->pool.add(req, numbered(c), MPI_DATATYPE_NULL);
  return complete(c, guard, dl, true);
}

template <class Policies>
Result<std::optional<BasicMpi<Policies>>> BasicMpi<Policies>::split_impl(std::uint32_t color, std::uint32_t key) {
  const auto c = detail::CallDesc::plain(detail::Call::split);
  if (auto s = enter(c, 0); !s) return tl::unexpected(std::move(s.error()));
  const auto dl = deadline();
  auto guard = lock();
  if (auto s = preflight(c, dl); !s) return tl::unexpected(std::move(s.error()));
  // MPI wants non-negative int colors and int keys; polycoll's are any
  // uint32. Gather everyone's (color, key) and give MPI int equivalents:
  // for a color, the lowest rank that chose it (distinct colors get distinct
  // ranks); for a key, the rank's position in its (key, old rank) order. Every rank computes the same answer, so a
  // bad value cannot leave some ranks in the collective and others not.
  // The exchange is bounded by op_timeout; once it completed every rank has
  // entered split, so MPI_Comm_split (which has no nonblocking form) cannot
  // wait for a rank that never comes.
  const std::size_t w = state_->size;
  auto& x = state_->xbuf;
  try {
    if (x.size() < 2 * (w + 1)) x.resize(2 * (w + 1));
  } catch (const std::bad_alloc&) {
    return tl::unexpected(this->error(Errc::backend_failure, c, "out of memory"));
  }
  x[2 * w] = color;
  x[2 * w + 1] = key;
  if (auto s = exchange(c, 2, dl); !s) return tl::unexpected(std::move(s.error()));
  const std::uint64_t* all = x.data();
  int mpi_color = MPI_UNDEFINED;
  int mpi_key = 0;
  if (color != no_color) {
    std::size_t first = 0;
    while (all[2 * first] != color) ++first;  // this rank's own entry ends the search
    mpi_color = static_cast<int>(first);
    for (std::size_t q = 0; q < w; ++q) {
      if (all[2 * q] == color && (all[2 * q + 1] < key || (all[2 * q + 1] == key && q < state_->rank))) ++mpi_key;
    }
  }
  MPI_Comm sub = MPI_COMM_NULL;
  const int rc = MPI_Comm_split(state_->comm, mpi_color, mpi_key, &sub);
  if (rc != MPI_SUCCESS) return tl::unexpected(mpi_error(c, rc, "MPI_Comm_split").error());
  if (sub == MPI_COMM_NULL) return std::optional<BasicMpi>{};
  guard.unlock();
  auto made = make("split()", sub, Mode::adopt, state_->options);
  if (!made) {
    MPI_Comm_free(&sub);
    return tl::unexpected(this->error(made.error().code, c, made.error().message, made.error().native));
  }
  return std::optional<BasicMpi>{std::move(*made)};
}

template <class Policies>
void BasicMpi<Policies>::release() noexcept {
  if (!state_) return;
  State& s = *state_;
  try {
    const bool usable = detail::mpi::mpi_usable();
    auto guard = lock();
    // One bound for everything the destruction may wait for (the drop
    // contract): the pending operations, the status board's agreement (at
    // most board_meet) and the all_reduce window's, each with what is left of it.
    const auto until = detail::Clock::now() + s.options.drop_timeout;
    const auto left = [&until] {
      const auto now = detail::Clock::now();
      return now >= until ? std::chrono::milliseconds(0) : std::chrono::ceil<std::chrono::milliseconds>(until - now);
    };
    if (!s.pool.empty() && !usable) {
      log(LogLevel::warning, detail::cat("Mpi communicator (rank ", s.rank, " of ", s.size, ") destroyed after "
                                         "MPI_Finalize with ", s.pool.size(), " pending operation(s): ",
                                         pending_text(), "; nothing can be released"));
    } else if (!s.pool.empty()) {
      std::optional<Error> ignored;  // errors of operations nobody waits for any more
      (void)drain(until, s.seq, guard, ignored);
      if (!s.pool.empty()) {
        const std::string names = pending_text();
        std::size_t leaked = 0;
        for (std::size_t i = 0; i < s.pool.size(); ++i) {
          MPI_Request& r = s.pool.request(i);
          const auto call = s.pool.pending(i).call.call;
          if (r == MPI_REQUEST_NULL) {
            continue;  // an unmatched receive: nothing was posted to MPI
          } else if (call == detail::Call::send || call == detail::Call::recv) {
            MPI_Request_free(&r);  // completes on its own; MPI may still touch the buffer
            // A small send's copy is polycoll's: leak it rather than free it under MPI.
            (void)s.pool.pending(i).scratch.release();
          } else {
            ++leaked;  // MPI forbids freeing or cancelling a nonblocking collective
            // MPI may still write its scratch block: leak it rather than free it under MPI.
            (void)s.pool.pending(i).scratch.release();
          }
        }
        log(LogLevel::warning,
            detail::cat("Mpi communicator (rank ", s.rank, " of ", s.size, ") destroyed with ", s.pool.size(),
                        " pending operation(s) after waiting ", s.options.drop_timeout.count(),
                        " ms: unmatched receives withdrawn, posted sends/receives released to MPI",
                        leaked ? ", collectives left to MPI" : "", "; dropped: ", names));
      }
      s.pool.clear();
    }
    if (usable) {
      // A board its node's ranks do not free together is left to
      // MPI_Finalize, silently: a rank that leaves later is no fault.
      (void)s.board.release(std::min(left(), detail::mpi::board_meet));
      // The 2-rank all_reduce window (2 ranks only), the node window (2 or
      // more: at 2 it serves the collectives other than all_reduce), and the
      // hierarchical path's window over the node's ranks, each with what is
      // left of the bound; but once the ranks have met to free one, they are
      // all here and meet again within microseconds: the next waits at least
      // board_meet, so that a rank that came late within the bound does not
      // leave it to MPI_Finalize. One warning names every window left.
      bool met = false;
      std::string stranded;
      const auto release = [&](detail::mpi::ShmWindow& win, const char* which) {
        if (!win.ready()) return;
        met = win.release(met ? std::max(left(), detail::mpi::board_meet) : left());
        if (!met) stranded += detail::cat(stranded.empty() ? "" : " and ", which);
      };
      release(s.shm, "the shared-memory window of the 2-rank all_reduce");
      release(s.node_shm, "the shared-memory window of the node's collectives");
      release(s.hier_shm, "the hierarchical path's window (over its node's ranks)");
      if (!stranded.empty()) {
        log(LogLevel::warning,
            detail::cat("Mpi communicator (rank ", s.rank, " of ", s.size,
                        ") destroyed: its ranks did not all meet within drop_timeout (",
                        s.options.drop_timeout.count(), " ms) to free ", stranded,
                        " together; left to MPI_Finalize"));
      }
      if (s.cross_comm != MPI_COMM_NULL) MPI_Comm_free(&s.cross_comm);
      if (s.node_comm != MPI_COMM_NULL) MPI_Comm_free(&s.node_comm);
      if (s.pair_comm != MPI_COMM_NULL) MPI_Comm_free(&s.pair_comm);
      if (s.owned) {
        MPI_Comm_free(&s.comm);
      } else if (s.saved != MPI_ERRHANDLER_NULL) {
        MPI_Comm_set_errhandler(s.comm, s.saved);
        MPI_Errhandler_free(&s.saved);
      }
    }
  } catch (...) {
    // Only message formatting can throw (bad_alloc); the contract is to never throw.
  }
  state_.reset();
}

// The reductions' bodies take the pair's detail::mpi::Reduction (reduction.hpp).
template <class Policies>
template <DType D, ReduceOp Op, class T>
Status BasicMpi<Policies>::all_reduce_impl(dtype_tag<D>, op_tag<Op>, T* buf, std::size_t count) {
  return all_reduce_into(detail::mpi::reduction_of<D, Op>, nullptr, buf, count);
}

template <class Policies>
template <DType D, ReduceOp Op, class T>
Status BasicMpi<Policies>::all_reduce_impl(dtype_tag<D>, op_tag<Op>, const T* send, T* recv, std::size_t count) {
  return all_reduce_into(detail::mpi::reduction_of<D, Op>, send, recv, count);
}

template <class Policies>
template <DType D, ReduceOp Op, class T>
Status BasicMpi<Policies>::all_reduce_value_impl(dtype_tag<D> d, op_tag<Op> o, T* value) {
  if constexpr (!nonblocking) {
    if (!deadline()) return all_reduce_impl(d, o, value, 1);
  }
  std::unique_ptr<T> cell;
  try {
    cell = std::make_unique<T>(*value);
  } catch (const std::bad_alloc&) {
    return tl::unexpected(this->error(Errc::backend_failure,
                                      detail::CallDesc::reduction(detail::Call::all_reduce, 1, D, Op),
                                      "out of memory for the one-value cell"));
  }
  Status st = all_reduce_impl(d, o, cell.get(), 1);
  if (st && nonblocking) st = sync_impl();
  if (!st) {
    (void)cell.release();  // MPI may still write it
    return st;
  }
  *value = *cell;
  return {};
}

template <class Policies>
template <DType D, ReduceOp Op, class T>
Status BasicMpi<Policies>::reduce_scatter_impl(dtype_tag<D>, op_tag<Op>, const T* send, T* recv, std::size_t count) {
  return reduce_scatter_into(detail::mpi::reduction_of<D, Op>, send, recv, count);
}

template <class Policies>
Status BasicMpi<Policies>::reduce_scatter_into(const detail::mpi::Reduction& r, const void* send, void* recv,
                                               std::size_t count) {
  const auto c = detail::CallDesc::reduction(detail::Call::reduce_scatter, count, r.dtype, r.op);
  if (!live(count)) [[unlikely]] return enter(c, count);
  const std::size_t w = state_->size;
  const std::size_t bytes = count * r.size;
  // In place (recv is this rank's block of send): the result goes to a
  // scratch block first (below). Any other overlap of send and recv was
  // rejected by the front end.
  const bool in_place = count != 0 && recv == static_cast<const std::byte*>(send) + state_->rank * bytes;
  int rc = MPI_SUCCESS;
  const MPI_Op op = op_for(r, rc, w * bytes);
  if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Op_create");
  const MPI_Datatype dt = r.datatype();
  const int n = static_cast<int>(count);
  const auto dl = deadline();
  auto guard = lock();
  // The node window folds in rank order: it serves Options::reproducible too.
  if (pair_algorithms(r)) {
    if (auto s = through_node_window(c, dl, w * bytes, [&](const detail::PackedFingerprint* fp) {
          return state_->node_shm.reduce_scatter(r.body, r.size, send, recv, count, fp);
        })) {
      if (*s && r.avg()) r.divide(recv, count, w);  // success: the window served it (count > 0)
      return std::move(*s);
    }
  } else {
    state_->last_algorithm = "none";
    if (auto s = preflight(c, dl); !s) return s;
    state_->last_algorithm = "mpi";
  }
  if (ordered(r)) {
    state_->last_algorithm = "rank order";
    return ordered_reduce_scatter(r, c, send, recv, count, dl);
  }
  // The in-place form changes the rank's own block of send and nothing
  // else, as on every backend. MPI_IN_PLACE cannot do that: it leaves the
  // result in block 0, another rank's input on every rank but 0. So MPI
  // reduces send into a scratch block (its recv may not overlap send), and
  // the result is copied into the rank's block once complete. The scratch is
  // reused by blocking calls and owned by the pending entry of a posted one.
  void* result = recv;
  std::unique_ptr<std::byte[]> owned;
  if (in_place) {
    try {
      if (nonblocking || dl) {
        owned = std::make_unique_for_overwrite<std::byte[]>(bytes);
        result = owned.get();
      } else {
        if (state_->reduce_scatter_scratch.size() < bytes) state_->reduce_scatter_scratch.resize(bytes);
        result = state_->reduce_scatter_scratch.data();
      }
    } catch (const std::bad_alloc&) {
      return tl::unexpected(this->error(Errc::backend_failure, c, "out of memory (the in-place result block)"));
    }
  }
  if (nonblocking || dl) {
    MPI_Request req = MPI_REQUEST_NULL;
    rc = MPI_Ireduce_scatter_block(send, result, n, dt, op, state_->comm, &req);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Ireduce_scatter_block");
    detail::mpi::Finish f;
    if (in_place) {
      f = {r.move_finish, recv, result, count, w};
    } else if (r.avg()) {
      f = {r.divide_finish, recv, nullptr, count, w};
    }
    return posted(req, c, dt, f, "MPI_Ireduce_scatter_block", dl, std::move(owned));
  } else {
    rc = MPI_Reduce_scatter_block(send, result, n, dt, op, state_->comm);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Reduce_scatter_block");
    if (in_place) std::memcpy(recv, result, bytes);
    if (r.avg()) r.divide(recv, count, w);
  }
  return {};
}

template <class Policies>
template <DType D, class T>
Status BasicMpi<Policies>::broadcast_impl(dtype_tag<D>, T* buf, std::size_t count, std::size_t root) {
  const auto c = detail::CallDesc::rooted(detail::Call::broadcast, count, D, root);
  if (!live(count)) [[unlikely]] return enter(c, count);
  const MPI_Datatype dt = detail::mpi::type_map<D>::datatype();
  const int n = static_cast<int>(count), r = static_cast<int>(root);
  return collective(
      c, dt, "MPI_Bcast", "MPI_Ibcast",
      [&](MPI_Request* req) {
        return req ? MPI_Ibcast(buf, n, dt, r, state_->comm, req) : MPI_Bcast(buf, n, dt, r, state_->comm);
      },
      {}, count * sizeof(T),
      [&](const detail::PackedFingerprint* fp) { return state_->node_shm.broadcast(buf, count * sizeof(T), root, fp); },
      [&](bool& done) { return hierarchical_broadcast(c, buf, count * sizeof(T), root, done); });
}

template <class Policies>
template <DType D, class T>
Status BasicMpi<Policies>::all_gather_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count) {
  const auto c = detail::CallDesc::movement(detail::Call::all_gather, count, D);
  if (!live(count)) [[unlikely]] return enter(c, count);
  // Any other overlap of send and recv was rejected by the front end.
  const bool in_place = count != 0 && static_cast<const void*>(send) == static_cast<const void*>(recv + state_->rank * count);
  const MPI_Datatype dt = detail::mpi::type_map<D>::datatype();
  const int n = static_cast<int>(count);
  const void* sbuf = in_place ? MPI_IN_PLACE : static_cast<const void*>(send);
  return collective(
      c, dt, "MPI_Allgather", "MPI_Iallgather",
      [&](MPI_Request* req) {
        return req ? MPI_Iallgather(sbuf, n, dt, recv, n, dt, state_->comm, req)
                   : MPI_Allgather(sbuf, n, dt, recv, n, dt, state_->comm);
      },
      {}, count * sizeof(T),
      [&](const detail::PackedFingerprint* fp) { return state_->node_shm.all_gather(send, recv, count * sizeof(T), fp); });
}

template <class Policies>
template <DType D, ReduceOp Op, class T>
Status BasicMpi<Policies>::reduce_impl(dtype_tag<D>, op_tag<Op>, const T* send, T* recv, std::size_t count,
                                       std::size_t root) {
  return reduce_into(detail::mpi::reduction_of<D, Op>, send, recv, count, root);
}

template <class Policies>
Status BasicMpi<Policies>::reduce_into(const detail::mpi::Reduction& r, const void* send, void* recv,
                                       std::size_t count, std::size_t root) {
  auto c = detail::CallDesc::reduction(detail::Call::reduce, count, r.dtype, r.op);
  c.root = root;
  if (!live(count)) [[unlikely]] return enter(c, count);
  const std::size_t bytes = count * r.size;
  const bool at_root = state_->rank == root;
  // The node window (3+ ranks on one node) folds in rank order, so it
  // serves Options::reproducible too; 0 bytes keeps a call off it.
  const std::size_t window_bytes = pair_algorithms(r) ? bytes : 0;
  const auto window = [&](const detail::PackedFingerprint* fp) {
    if (!state_->node_shm.reduce(r.body, r.size, send, recv, count, root, fp)) return false;
    if (r.avg() && at_root) r.divide(recv, count, state_->size);
    return true;
  };
  if (ordered(r)) {
    const auto dl = deadline();
    auto guard = lock();
    if (auto s = through_node_window(c, dl, window_bytes, window)) return std::move(*s);
    state_->last_algorithm = "rank order";
    return ordered_reduce(r, c, send, recv, count, false, root, dl);
  }
  int rc = MPI_SUCCESS;
  const MPI_Op op = op_for(r, rc, bytes);
  if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Op_create");
  const MPI_Datatype dt = r.datatype();
  const void* sbuf = at_root && count != 0 && recv == send ? MPI_IN_PLACE : send;
  const int n = static_cast<int>(count), rt = static_cast<int>(root);
  detail::mpi::Finish f;  // Avg: the root divides the sum once it is complete
  if (r.avg() && at_root) f = {r.divide_finish, recv, nullptr, count, state_->size};
  return collective(c, dt, "MPI_Reduce", "MPI_Ireduce", [&](MPI_Request* req) {
    if (req) return MPI_Ireduce(sbuf, recv, n, dt, op, rt, state_->comm, req);
    if (detail::mpi::in_place_reduce_faults && sbuf == MPI_IN_PLACE && root != 0) {
      // MPICH's blocking MPI_Reduce faults on MPI_IN_PLACE at a root other
      // than 0 (MPICH 4.0.2, its reduce-scatter + gather algorithm: from about
      // 1000 f32 with MPI_SUM at 2-4 ranks). The root reduces from a copy of
      // its buffer instead; MPI_Ireduce and root 0 are not affected.
      auto& copy = state_->in_place_copy;
      try {
        if (copy.size() < bytes) copy.resize(bytes);
      } catch (const std::bad_alloc&) {
        return MPI_ERR_NO_MEM;
      }
      std::memcpy(copy.data(), recv, bytes);
      return MPI_Reduce(copy.data(), recv, n, dt, op, rt, state_->comm);
    }
    return MPI_Reduce(sbuf, recv, n, dt, op, rt, state_->comm);
  }, f, window_bytes, window, [&](bool& done) {
    return hierarchical_reduce(r, c, send, recv, count, root, op, done);
  });
}

template <class Policies>
template <DType D, class T>
Status BasicMpi<Policies>::gather_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count, std::size_t root) {
  const auto c = detail::CallDesc::rooted(detail::Call::gather, count, D, root);
  if (!live(count)) [[unlikely]] return enter(c, count);
  const MPI_Datatype dt = detail::mpi::type_map<D>::datatype();
  const bool in_place = state_->rank == root && count != 0 &&
                        static_cast<const void*>(send) == static_cast<const void*>(recv + root * count);
  const void* sbuf = in_place ? MPI_IN_PLACE : static_cast<const void*>(send);
  const int n = static_cast<int>(count);
  return collective(c, dt, "MPI_Gather", "MPI_Igather", [&](MPI_Request* req) {
    return req ? MPI_Igather(sbuf, n, dt, recv, n, dt, static_cast<int>(root), state_->comm, req)
               : MPI_Gather(sbuf, n, dt, recv, n, dt, static_cast<int>(root), state_->comm);
  });
}

template <class Policies>
template <DType D, class T>
Status BasicMpi<Policies>::scatter_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count, std::size_t root) {
  const auto c = detail::CallDesc::rooted(detail::Call::scatter, count, D, root);
  if (!live(count)) [[unlikely]] return enter(c, count);
  const MPI_Datatype dt = detail::mpi::type_map<D>::datatype();
  const bool in_place = state_->rank == root && count != 0 &&
                        static_cast<const void*>(recv) == static_cast<const void*>(send + root * count);
  void* rbuf = in_place ? MPI_IN_PLACE : static_cast<void*>(recv);
  const int n = static_cast<int>(count);
  return collective(c, dt, "MPI_Scatter", "MPI_Iscatter", [&](MPI_Request* req) {
    return req ? MPI_Iscatter(send, n, dt, rbuf, n, dt, static_cast<int>(root), state_->comm, req)
               : MPI_Scatter(send, n, dt, rbuf, n, dt, static_cast<int>(root), state_->comm);
  });
}

template <class Policies>
template <DType D, class T>
Status BasicMpi<Policies>::all_to_all_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count) {
  const auto c = detail::CallDesc::movement(detail::Call::all_to_all, count, D);
  if (!live(count)) [[unlikely]] return enter(c, count);
  const MPI_Datatype dt = detail::mpi::type_map<D>::datatype();
  const int n = static_cast<int>(count);
  return collective(c, dt, "MPI_Alltoall", "MPI_Ialltoall", [&](MPI_Request* req) {
    return req ? MPI_Ialltoall(send, n, dt, recv, n, dt, state_->comm, req)
               : MPI_Alltoall(send, n, dt, recv, n, dt, state_->comm);
  });
}

template <class Policies>
template <DType D, class T>
Status BasicMpi<Policies>::all_gather_v_impl(dtype_tag<D>, const T* send, std::size_t send_count, T* recv,
                         const detail::VLayout& layout) {
  const auto c = detail::CallDesc::movement(detail::Call::all_gather_v, layout.total(), D);
  if (!live(send_count)) [[unlikely]] return enter(c, send_count);
  const MPI_Datatype dt = detail::mpi::type_map<D>::datatype();
  const bool in_place =
      send_count != 0 && static_cast<const void*>(send) == static_cast<const void*>(recv + layout.displ(state_->rank));
  if (state_->size == 1) {
    // MPICH 4.0's MPI_Allgatherv on one rank ignores the displacement
    // (writes block 0 at offset 0; tests/conformance_collectives.hpp
    // catches it), and a local move is all that is needed anyway.
    T* dst = recv + layout.displ(0);
    if (!in_place && send_count != 0) std::memmove(static_cast<void*>(dst), send, send_count * sizeof(T));
    return {};
  }
  const auto dl = deadline();
  auto guard = lock();
  if (auto s = preflight(c, dl); !s) return s;
  if (auto s = to_ints(c, {&layout}); !s) return s;
  const int* ints = state_->v_ints.data();
  const std::size_t w = state_->size;
  const void* sbuf = in_place ? MPI_IN_PLACE : static_cast<const void*>(send);
  const int sn = static_cast<int>(send_count);
  if (dl) {
    MPI_Request req = MPI_REQUEST_NULL;
    const int rc = MPI_Iallgatherv(sbuf, sn, dt, recv, ints, ints + w, dt, state_->comm, &req);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Iallgatherv");
    return await_v(req, c, dt, "MPI_Iallgatherv", dl);
  }
  const int rc = MPI_Allgatherv(sbuf, sn, dt, recv, ints, ints + w, dt, state_->comm);
  if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Allgatherv");
  return {};
}

template <class Policies>
template <DType D, class T>
Status BasicMpi<Policies>::all_to_all_v_impl(dtype_tag<D>, const T* send, const detail::VLayout& sl, T* recv,
                         const detail::VLayout& rl) {
  const auto c = detail::CallDesc::movement(detail::Call::all_to_all_v, detail::npos, D);
  if (!live(0)) [[unlikely]] return enter(c, 0);
  const MPI_Datatype dt = detail::mpi::type_map<D>::datatype();
  const auto dl = deadline();
  auto guard = lock();
  if (auto s = preflight(c, dl); !s) return s;
  if (auto s = to_ints(c, {&sl, &rl}); !s) return s;
  const int* ints = state_->v_ints.data();
  const std::size_t w = state_->size;
  if (dl) {
    MPI_Request req = MPI_REQUEST_NULL;
    const int rc = MPI_Ialltoallv(send, ints, ints + w, dt, recv, ints + 2 * w, ints + 3 * w, dt, state_->comm, &req);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Ialltoallv");
    return await_v(req, c, dt, "MPI_Ialltoallv", dl);
  }
  const int rc =
      MPI_Alltoallv(send, ints, ints + w, dt, recv, ints + 2 * w, ints + 3 * w, dt, state_->comm);
  if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Alltoallv");
  return {};
}

template <class Policies>
template <DType D, class T>
Status BasicMpi<Policies>::send_impl(dtype_tag<D>, const T* ptr, std::size_t count, std::size_t dest, std::uint32_t tag) {
  const auto c = detail::CallDesc::p2p(detail::Call::send, count, D, dest, tag);
  if (!live(count)) [[unlikely]] return enter(c, count);
  if (auto s = check_tag(c, tag); !s) return s;
  const MPI_Datatype dt = detail::mpi::type_map<D>::datatype();
  auto guard = lock();
  if (auto s = room(c); !s) return s;
  const std::size_t bytes = count * sizeof(T);
  // A small send is sent from a copy made now (detail::eager_bytes), as on
  // every backend: MPI may read the caller's buffer until the request
  // completes (MPICH does so for a send to self), so without it a buffer
  // reused before sync() would send its later contents on some paths only.
  std::unique_ptr<std::byte[]> copy;
  const void* from = ptr;
  if (bytes != 0 && bytes <= detail::eager_bytes) {
    try {
      copy = state_->pool.take_eager();  // recycled: no allocation in steady state
      std::memcpy(copy.get(), ptr, bytes);
      from = copy.get();
    } catch (const std::bad_alloc&) {
      return tl::unexpected(this->error(Errc::backend_failure, c, "out of memory copying a small send"));
    }
  }
  MPI_Request req = MPI_REQUEST_NULL;
  const int rc = MPI_Isend(from, static_cast<int>(count), dt, static_cast<int>(dest), static_cast<int>(tag),
                           state_->comm, &req);
  if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Isend");
  state_->pool.add_send(req, numbered(c), dt, std::move(copy));
  // Recorded once posted: a send that returned an error is not checked.
  if (state_->check) [[unlikely]] state_->ledger.record(numbered(c), ptr, bytes);
  return {};
}

template <class Policies>
template <DType D, class T>
Status BasicMpi<Policies>::recv_impl(dtype_tag<D>, T* ptr, std::size_t count, std::size_t src, std::uint32_t tag) {
  const auto c = detail::CallDesc::p2p(detail::Call::recv, count, D, src, tag);
  if (!live(count)) [[unlikely]] return enter(c, count);
  if (auto s = check_tag(c, tag); !s) return s;
  const MPI_Datatype dt = detail::mpi::type_map<D>::datatype();
  auto guard = lock();
  if (auto s = room(c); !s) return s;
  // Matched later with MPI_Improbe, so that a message larger than the buffer
  // is detected (with its size) before it is received: a truncating
  // MPI_Irecv would report the error through MPI_Wait, which MPICH raises on
  // MPI_COMM_WORLD's error handler (fatal by default), not on ours.
  state_->pool.add_unmatched(numbered(c), dt, ptr);
  // Try at once: a message already here is received straight into place,
  // unless an earlier receive from the same (src, tag) is still unmatched:
  // that one must get the earlier message (MPI's non-overtaking order).
  const std::size_t last = state_->pool.size() - 1;
  if (!blocked_by_earlier(last)) (void)try_match(last, state_->deferred);
  state_->pool.compact();
  return {};
}

/// @cond POLYCOLL_LIBRARY_INTERNALS
// Mpi's (the default policies') calls of one valid (dtype, op) pair: those of
// every backend (detail/linkage.hpp) and its out-of-place and value
// all_reduce; `extern` declares, empty defines (src/mpi.cpp).
#define POLYCOLL_DETAIL_MPI_PAIR(Prefix, D, Op)                                                                   \
  POLYCOLL_DETAIL_BACKEND_PAIR(Prefix, Mpi, D, Op)                                                              \
  Prefix template Status Mpi::all_reduce_impl(dtype_tag<DType::D>, op_tag<ReduceOp::Op>,                        \
                                              const dtype_tag<DType::D>::type*, dtype_tag<DType::D>::type*,     \
                                              std::size_t);                                                     \
  Prefix template Status Mpi::all_reduce_value_impl(dtype_tag<DType::D>, op_tag<ReduceOp::Op>,                  \
                                                    dtype_tag<DType::D>::type*);

// libpolycoll holds Mpi, the default policies: its members, its seed surface
// (and so AnyCommunicator's table for it), and every collective and
// point-to-point call of it for each dtype and valid (dtype, op) pair, so a
// typed call in a user TU compiles to a call into the library (as for
// Threads). The members defined out of the class are not inline, so the
// `extern template` suppresses them. Other policy bundles instantiate inline.
#if !defined(POLYCOLL_HEADER_ONLY)
extern template class BasicMpi<mpi::DefaultPolicies>;
extern template class Communicator<Mpi>;
extern template const AnyCommunicator::VTable& AnyCommunicator::vtable_of<Mpi>() noexcept;
#if !defined(POLYCOLL_DETAIL_BUILDING_LIBRARY)
#define POLYCOLL_DETAIL_X(D, Op) POLYCOLL_DETAIL_MPI_PAIR(extern, D, Op)
POLYCOLL_DETAIL_FOR_EACH_VALID_PAIR(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X
#define POLYCOLL_DETAIL_X(D) POLYCOLL_DETAIL_BACKEND_DTYPE(extern, Mpi, D)
POLYCOLL_DETAIL_FOR_EACH_DTYPE(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X
#endif
#endif
/// @endcond

}  // namespace polycoll
