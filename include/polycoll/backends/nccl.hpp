#pragma once
/// @file backends/nccl.hpp
/// Nccl: ranks are CUDA devices, communicating through NCCL (2.19 or newer;
/// written against 2.28).
///
/// `Nccl::init_all(devices)` makes one communicator per GPU for one process
/// (drive each from its own thread); `Nccl::from_unique_id(id, world, rank,
/// device)` joins a communicator whose ncclUniqueId you distributed;
/// `Nccl::from_mpi(comm, device)` (when polycoll was built with MPI) does the
/// distribution over MPI. Buffers are device memory of the communicator's
/// device (or managed / registered host memory).
///
/// Each communicator is created with `ncclCommInitRankConfig` in non-blocking
/// mode and owns a non-blocking CUDA stream; every call makes its device
/// current and restores the caller's. Collectives are enqueued on that stream
/// and return; sync() waits. send/recv are queued and launched together in one
/// ncclGroupStart/End at the next sync()/barrier(), so the exchange pattern
/// never deadlocks; NCCL has no tags, so tags are accepted and ignored
/// (messages between a pair of ranks match in order). `Options::op_timeout`
/// bounds sync()/barrier()/split() and a launch that NCCL keeps in progress;
/// on expiry the communicator is aborted (ncclCommAbort) and the call returns
/// Errc::timeout naming the pending operations; later calls return
/// Errc::aborted. The destructor finalizes within `drop_timeout`, then
/// destroys, or logs and aborts. See docs/nccl.md.///
/// Two parts (docs/design.md, "Two build modes"): the class, which every TU
/// that names Nccl parses, and its definitions, which only libpolycoll
/// (src/nccl.cpp) and TUs with POLYCOLL_HEADER_ONLY parse. A TU of the
/// compiled mode sees declarations only, so it pays neither for the engine
/// (backends/nccl/engine.hpp) nor for the code of the calls: its typed calls
/// compile to calls into the library, which instantiates every member
/// template the front end reaches for every dtype and every pair NCCL
/// reduces.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include <polycoll/config.hpp>
#include <polycoll/backends/nccl/types.hpp>
#include <polycoll/any_communicator.hpp>
#include <polycoll/communicator.hpp>
#include <polycoll/detail/linkage.hpp>
#include <polycoll/stream_sync.hpp>

#if POLYCOLL_HAS_MPI && __has_include(<mpi.h>)
#include <mpi.h>
#endif

namespace polycoll {

namespace detail::nccl {
class Engine;
}  // namespace detail::nccl

class Nccl;

/// Nccl moves every DType (I16/U16 and bool as bytes, complex as pairs).
template <DType D>
struct supports_dtype<Nccl, D> : std::true_type {};
/// Nccl reduces what NCCL reduces after the static rewrites of
/// backends/nccl/types.hpp: not I16/U16 at all, not complex Prod.
template <DType D, ReduceOp Op>
struct supports_reduction<Nccl, D, Op> : std::bool_constant<detail::nccl::reducible<D, Op>> {};

/// CUDA devices as ranks, through NCCL. Move-only; see the file comment and docs/nccl.md.
class Nccl : public Communicator<Nccl> {
  using Engine = detail::nccl::Engine;

 public:
  /// The name in error messages and AnyCommunicator::backend_name().
  static constexpr std::string_view backend_name = "nccl";

  /// A fresh ncclUniqueId (ncclGetUniqueId), to distribute to every rank.
  [[nodiscard]] static Result<ncclUniqueId> unique_id();

  /// Rank `rank` of `world` on `device`, all ranks calling with the same `id`
  /// (from threads or processes). Blocks until every rank has joined, or
  /// until op_timeout when set.
  [[nodiscard]] static Result<Nccl> from_unique_id(const ncclUniqueId& id, std::size_t world, std::size_t rank,
                                                   int device, Options options = {}) {
    options = detail::with_environment(options);
    return detail::factory_result(options.on_error, make_from_unique_id(id, world, rank, device, options));
  }

  /// One communicator per device in `devices` (rank i on devices[i]) for this
  /// process. Drive each from its own host thread: NCCL collectives of one
  /// communicator block until every rank has launched theirs.
  [[nodiscard]] static Result<std::vector<Nccl>> init_all(std::span<const int> devices, Options options = {}) {
    options = detail::with_environment(options);
    return detail::factory_result(options.on_error, make_init_all(devices, options));
  }

#if POLYCOLL_HAS_MPI && __has_include(<mpi.h>)
  /// Collective over `comm`: rank 0 creates the ncclUniqueId, MPI broadcasts
  /// it, every MPI rank becomes the same NCCL rank on `device`. MPI must be
  /// initialised (polycoll::mpi::Environment or MPI_Init_thread).
  [[nodiscard]] static Result<Nccl> from_mpi(MPI_Comm comm, int device, Options options = {}) {
    options = detail::with_environment(options);
    return detail::factory_result(options.on_error, make_from_mpi(comm, device, options));
  }
#endif

  /// Takes over `other`'s communicator; `other` is left moved-from (its calls return Errors).
  Nccl(Nccl&& other) noexcept;
  /// Releases the held communicator (drop contract), then takes over `other`'s.
  Nccl& operator=(Nccl&& other) noexcept;
  Nccl(const Nccl&) = delete;
  Nccl& operator=(const Nccl&) = delete;
  /// Finalizes the communicator within Options::drop_timeout, else logs and
  /// aborts it; never throws.
  ~Nccl();

  /// The CUDA device of this rank (-1 when moved-from).
  [[nodiscard]] int device() const noexcept;
  /// The communication stream (non-blocking, owned by the communicator).
  [[nodiscard]] cudaStream_t stream() const noexcept;
  /// The NCCL communicator (nullptr when moved-from or aborted). Your own
  /// calls on it must not run concurrently with polycoll's.
  [[nodiscard]] ncclComm_t native() const noexcept;
  /// The options this communicator was made with.
  [[nodiscard]] const Options& options() const noexcept;
  /// Operations submitted and not yet completed by sync().
  [[nodiscard]] std::size_t pending() const;

 private:
  friend class Communicator<Nccl>;
  template <DType D>
  using map = detail::nccl::type_map<D>;

  explicit Nccl(std::unique_ptr<Engine> e) noexcept;

  // The front end records every call here.
  detail::FlightRecorder* flight_recorder_impl() const noexcept;

  // from_unique_id() before Options::on_error has its say (from_mpi's too).
  static Result<Nccl> make_from_unique_id(const ncclUniqueId& id, std::size_t world, std::size_t rank, int device,
                                          const Options& options);
  // init_all() before Options::on_error has its say.
  static Result<std::vector<Nccl>> make_init_all(std::span<const int> devices, const Options& options);
#if POLYCOLL_HAS_MPI && __has_include(<mpi.h>)
  // from_mpi() before Options::on_error has its say.
  static Result<Nccl> make_from_mpi(MPI_Comm comm, int device, const Options& options);
#endif

  // Options::on_error: the front end printed the error; abort the NCCL
  // communicator (ranks in other processes see it fail or time out), then
  // the front end ends this process.
  void abort_impl(const Error&) const noexcept;

  // Every device exists and appears once (NCCL needs one GPU per rank).
  static Status check_devices(std::string_view what, std::span<const int> devices);
  // Waits (bounded by op_timeout) for communicators being initialised.
  static Status settle_all(std::string_view what, std::span<ncclComm_t> comms, const Options& options);
  static void abort_all(std::span<ncclComm_t> comms) noexcept;
  Status moved_from(const detail::CallDesc& c) const;

  // ------------------------------------------------------------ front-end hooks

  std::size_t world_size_impl() const noexcept;
  std::size_t rank_impl() const noexcept;

  // The NCCL op for (D, Op) on this communicator. At world size 1 Avg is
  // issued as Sum: the average of one contribution is that contribution, bit
  // for bit, and NCCL 2.28's one-rank path for ncclAvg left the last elements of
  // out-of-place ncclReduce/ncclReduceScatter unwritten (f32 x 4097 and f64 x
  // 8194 on an H200; docs/nccl.md).
  template <DType D, ReduceOp Op>
  ncclRedOp_t nccl_op() const noexcept;

  // Options::reproducible asks for the rank-order fold of every other
  // backend; NCCL reduces in an order of its own choosing (ring or tree,
  // split over channels, by size and topology), which polycoll cannot change,
  // so above one rank a floating or complex reduction says so instead of
  // silently differing. Integer and bool reductions are exact in any order
  // and go ahead. NCCL's own min and max are not polycoll's (NaN and the
  // order of -0 and +0: docs/nccl.md), so floating min/max are refused too.
  // (With one rank the result is the rank's own data, bit for bit.)
  [[gnu::cold]] Status unordered(const detail::CallDesc& c) const;
  template <DType D>
  bool ordered_refused() const noexcept;

  template <DType D, ReduceOp Op, class T>
  Status all_reduce_impl(dtype_tag<D>, op_tag<Op>, T* buf, std::size_t count);
  // Out of place: ncclAllReduce(send, recv).
  template <DType D, ReduceOp Op, class T>
  Status all_reduce_impl(dtype_tag<D>, op_tag<Op>, const T* send, T* recv, std::size_t count);
  // The value form: `value` is host memory, which NCCL cannot read; it goes
  // through a device scratch slot of the communicator (see Engine::all_reduce_value).
  template <DType D, ReduceOp Op, class T>
  Status all_reduce_value_impl(dtype_tag<D>, op_tag<Op>, T* value);
  template <DType D, class T>
  Status broadcast_impl(dtype_tag<D>, T* buf, std::size_t count, std::size_t root);
  template <DType D, class T>
  Status all_gather_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count);
  template <DType D, ReduceOp Op, class T>
  Status reduce_scatter_impl(dtype_tag<D>, op_tag<Op>, const T* send, T* recv, std::size_t count);
  // recv is null off the root, which NCCL allows there.
  template <DType D, ReduceOp Op, class T>
  Status reduce_impl(dtype_tag<D>, op_tag<Op>, const T* send, T* recv, std::size_t count, std::size_t root);
  // NCCL 2.28 has gather, scatter and all-to-all; before it they are grouped
  // send/recv, which is what NCCL itself does for them.
  template <DType D, class T>
  Status gather_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count, std::size_t root);
  template <DType D, class T>
  Status scatter_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count, std::size_t root);
  template <DType D, class T>
  Status all_to_all_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count);
  // NCCL has no v-collectives: grouped send/recv, launched at once (like the
  // other collectives, not queued for sync() as user send/recv are), so that
  // stream order with the collectives around it holds.
  template <DType D, class T>
  Status all_gather_v_impl(dtype_tag<D>, const T* send, std::size_t send_count, T* recv,
                           const detail::VLayout& layout);
  template <DType D, class T>
  Status all_to_all_v_impl(dtype_tag<D>, const T* send, const detail::VLayout& sl, T* recv,
                           const detail::VLayout& rl);
  // ncclGroupStart; body(send_to, recv_from) issues ncclSend/ncclRecv of
  // (ptr, NCCL elements, peer), empty ones skipped; ncclGroupEnd. The first
  // failure is returned.
  template <DType D, class Body>
  static ncclResult_t grouped_p2p(ncclComm_t comm, cudaStream_t s, Body&& body);

  // A group opened by group_start() gathers the queued send/recv and launches
  // them as one ncclGroupStart/End when the outermost group ends, instead of
  // at the next sync(). Collectives inside it launch as they are submitted.
  Status group_start_impl();
  Status group_end_impl();

  // Tags are not sent: NCCL matches a pair's messages in order.
  template <DType D, class T>
  Status send_impl(dtype_tag<D>, const T* buf, std::size_t count, std::size_t dest, std::uint32_t tag);
  template <DType D, class T>
  Status recv_impl(dtype_tag<D>, T* buf, std::size_t count, std::size_t src, std::uint32_t tag);

  Status sync_impl();
  Status barrier_impl();
  Result<std::optional<Nccl>> split_impl(std::uint32_t color, std::uint32_t key);
  StreamSyncOps* as_stream_sync_impl() noexcept;

  std::unique_ptr<Engine> e_;
};

/// @cond POLYCOLL_LIBRARY_INTERNALS
// libpolycoll holds the seed surface of Nccl (and so AnyCommunicator's table
// for it) and every member above (src/nccl.cpp): the dispatch over every
// (dtype, op) pair is compiled once there, and a typed call in a user TU is
// a call into the library.
#if !defined(POLYCOLL_HEADER_ONLY)
extern template class Communicator<Nccl>;
extern template const AnyCommunicator::VTable& AnyCommunicator::vtable_of<Nccl>() noexcept;
#endif
/// @endcond

}  // namespace polycoll

// The definitions: in libpolycoll (src/nccl.cpp), or inline with
// POLYCOLL_HEADER_ONLY (detail/linkage.hpp). A TU of the compiled mode does
// not parse them, nor the engine they need.
#if defined(POLYCOLL_HEADER_ONLY) || defined(POLYCOLL_DETAIL_DEFINE_NCCL)
#include <climits>
#include <string>
#include <utility>

#include <polycoll/backends/nccl/device.hpp>
#include <polycoll/backends/nccl/engine.hpp>
#include <polycoll/backends/nccl/error.hpp>
#include <polycoll/detail/call.hpp>
#include <polycoll/detail/on_error.hpp>
#include <polycoll/detail/text.hpp>
#include <polycoll/detail/wait.hpp>

namespace polycoll {

POLYCOLL_DETAIL_LIB_INLINE Result<ncclUniqueId> Nccl::unique_id() {
  ncclUniqueId id{};
  if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
    return fail(detail::nccl::errc_of(r), detail::cat("Nccl::unique_id() [nccl]: ", detail::nccl::nccl_text(r, "ncclGetUniqueId")),
                static_cast<int>(r));
  }
  return id;
}

POLYCOLL_DETAIL_LIB_INLINE Nccl::Nccl(Nccl&& other) noexcept : Communicator<Nccl>(std::move(other)), e_(std::move(other.e_)) {}

POLYCOLL_DETAIL_LIB_INLINE Nccl& Nccl::operator=(Nccl&& other) noexcept {
  if (this != &other) e_ = std::move(other.e_);  // the old communicator is released (drop contract)
  return *this;
}

// Engine's destructor: bounded finalize, else abort; never throws.
POLYCOLL_DETAIL_LIB_INLINE Nccl::~Nccl() = default;

POLYCOLL_DETAIL_LIB_INLINE int Nccl::device() const noexcept { return e_ ? e_->device() : -1; }

POLYCOLL_DETAIL_LIB_INLINE cudaStream_t Nccl::stream() const noexcept { return e_ ? e_->stream() : nullptr; }

POLYCOLL_DETAIL_LIB_INLINE ncclComm_t Nccl::native() const noexcept { return e_ ? e_->native() : nullptr; }

POLYCOLL_DETAIL_LIB_INLINE const Options& Nccl::options() const noexcept {
  static const Options none{};
  return e_ ? e_->options() : none;
}

POLYCOLL_DETAIL_LIB_INLINE std::size_t Nccl::pending() const { return e_ ? e_->pending() : 0; }

POLYCOLL_DETAIL_LIB_INLINE Nccl::Nccl(std::unique_ptr<Engine> e) noexcept : e_(std::move(e)) {}

POLYCOLL_DETAIL_LIB_INLINE detail::FlightRecorder* Nccl::flight_recorder_impl() const noexcept {
  return e_ ? e_->flight() : nullptr;
}

POLYCOLL_DETAIL_LIB_INLINE Result<Nccl> Nccl::make_from_unique_id(const ncclUniqueId& id, std::size_t world, std::size_t rank, int device,
                                        const Options& options) {
  const std::string what =
      detail::cat("Nccl::from_unique_id(world=", world, ", rank=", rank, ", device=", device, ')');
  if (auto s = detail::check_on_error_environment(detail::cat(what, " [nccl]")); !s)
    return tl::unexpected(std::move(s.error()));
  if (world == 0 || world > static_cast<std::size_t>(INT_MAX) || rank >= world) {
    return fail(Errc::invalid_argument, detail::cat(what, " [nccl]: rank must be in [0, world) and world in [1, INT_MAX]"));
  }
  if (auto s = check_devices(what, std::span<const int>(&device, 1)); !s) return tl::unexpected(std::move(s.error()));
  ncclComm_t comm = nullptr;
  {
    detail::nccl::DeviceGuard guard(device);
    if (guard.status() != cudaSuccess) {
      return fail(detail::nccl::errc_of(guard.status()),
                  detail::cat(what, " [nccl]: ", detail::nccl::cuda_text(guard.status(), "cudaSetDevice")));
    }
    ncclConfig_t config = detail::nccl::nonblocking_config();
    const ncclResult_t r =
        ncclCommInitRankConfig(&comm, static_cast<int>(world), id, static_cast<int>(rank), &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      const std::string text = detail::nccl::nccl_text(r, "ncclCommInitRankConfig", comm);
      if (comm != nullptr) (void)ncclCommAbort(comm);
      return fail(detail::nccl::errc_of(r), detail::cat(what, " [nccl]: ", text), static_cast<int>(r));
    }
  }
  ncclComm_t comms[1] = {comm};
  if (auto s = settle_all(what, comms, options); !s) return tl::unexpected(std::move(s.error()));
  auto e = Engine::adopt(comm, device, options, what);
  if (!e) return tl::unexpected(std::move(e.error()));
  return Nccl(std::move(*e));
}

POLYCOLL_DETAIL_LIB_INLINE Result<std::vector<Nccl>> Nccl::make_init_all(std::span<const int> devices, const Options& options) {
  std::string what = "Nccl::init_all(devices={";
  for (std::size_t i = 0; i < devices.size(); ++i) what += detail::cat(i ? ", " : "", devices[i]);
  what += "})";
  if (auto s = detail::check_on_error_environment(detail::cat(what, " [nccl]")); !s)
    return tl::unexpected(std::move(s.error()));
  if (devices.empty()) return fail(Errc::invalid_argument, detail::cat(what, " [nccl]: no devices"));
  if (devices.size() > static_cast<std::size_t>(INT_MAX)) {
    return fail(Errc::invalid_argument, detail::cat(what, " [nccl]: too many devices"));
  }
  if (auto s = check_devices(what, devices); !s) return tl::unexpected(std::move(s.error()));
  ncclUniqueId id{};
  if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
    return fail(detail::nccl::errc_of(r), detail::cat(what, " [nccl]: ", detail::nccl::nccl_text(r, "ncclGetUniqueId")),
                static_cast<int>(r));
  }
  const int n = static_cast<int>(devices.size());
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  {
    // One thread initialises every rank: inside a group (NCCL's rule), and
    // non-blocking, so the group returns at once and we poll below.
    detail::nccl::DeviceGuard restore(devices[0]);
    ncclConfig_t config = detail::nccl::nonblocking_config();
    std::string failure;
    ncclResult_t code = ncclSuccess;
    if (const ncclResult_t r = ncclGroupStart(); r != ncclSuccess) {
      return fail(detail::nccl::errc_of(r), detail::cat(what, " [nccl]: ", detail::nccl::nccl_text(r, "ncclGroupStart")),
                  static_cast<int>(r));
    }
    for (int i = 0; i < n; ++i) {
      if (const cudaError_t e = cudaSetDevice(devices[static_cast<std::size_t>(i)]); e != cudaSuccess) {
        if (failure.empty()) failure = detail::nccl::cuda_text(e, "cudaSetDevice");
        break;
      }
      const ncclResult_t r = ncclCommInitRankConfig(&comms[static_cast<std::size_t>(i)], n, id, i, &config);
      if (r != ncclSuccess && r != ncclInProgress && failure.empty()) {
        failure = detail::cat("rank ", i, ": ", detail::nccl::nccl_text(r, "ncclCommInitRankConfig"));
        code = r;
      }
    }
    const ncclResult_t end = ncclGroupEnd();
    if (failure.empty() && end != ncclSuccess && end != ncclInProgress) {
      failure = detail::nccl::nccl_text(end, "ncclGroupEnd (init)");
      code = end;
    }
    if (!failure.empty()) {
      abort_all(comms);
      return fail(code == ncclSuccess ? Errc::backend_failure : detail::nccl::errc_of(code),
                  detail::cat(what, " [nccl]: ", failure), static_cast<int>(code));
    }
  }
  if (auto s = settle_all(what, comms, options); !s) return tl::unexpected(std::move(s.error()));
  std::vector<Nccl> out;
  try {
    out.reserve(devices.size());
  } catch (const std::bad_alloc&) {
    abort_all(comms);
    return fail(Errc::backend_failure, detail::cat(what, " [nccl]: out of memory"));
  }
  for (std::size_t i = 0; i < comms.size(); ++i) {
    auto e = Engine::adopt(std::exchange(comms[i], nullptr), devices[i], options, what);
    if (!e) {
      abort_all(comms);  // the ranks after i; those before are finalized by `out`'s destructors
      return tl::unexpected(std::move(e.error()));
    }
    out.push_back(Nccl(std::move(*e)));
  }
  return out;
}

#if POLYCOLL_HAS_MPI && __has_include(<mpi.h>)

POLYCOLL_DETAIL_LIB_INLINE Result<Nccl> Nccl::make_from_mpi(MPI_Comm comm, int device, const Options& options) {
  const std::string what = detail::cat("Nccl::from_mpi(device=", device, ')');
  if (auto s = detail::check_on_error_environment(detail::cat(what, " [nccl]")); !s)
    return tl::unexpected(std::move(s.error()));
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init == 0 || fin != 0) {
    return fail(Errc::not_initialized, detail::cat(what, " [nccl]: MPI is not initialised (or already finalized)"));
  }
  if (comm == MPI_COMM_NULL) return fail(Errc::invalid_argument, detail::cat(what, " [nccl]: MPI_COMM_NULL"));
  int rank = 0, size = 1;
  if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS || MPI_Comm_size(comm, &size) != MPI_SUCCESS) {
    return fail(Errc::backend_failure, detail::cat(what, " [nccl]: MPI_Comm_rank/MPI_Comm_size failed"));
  }
  // Rank 0's ncclGetUniqueId result travels with the id, so that a failure
  // there fails every rank instead of leaving them waiting in init.
  struct Message {
    int status;
    ncclUniqueId id;
  } msg{};
  if (rank == 0) msg.status = static_cast<int>(ncclGetUniqueId(&msg.id));
  if (const int rc = MPI_Bcast(&msg, static_cast<int>(sizeof msg), MPI_BYTE, 0, comm); rc != MPI_SUCCESS) {
    return fail(Errc::backend_failure, detail::cat(what, " [nccl]: MPI_Bcast of the ncclUniqueId failed (", rc, ')'),
                rc);
  }
  if (msg.status != ncclSuccess) {
    const auto r = static_cast<ncclResult_t>(msg.status);
    return fail(detail::nccl::errc_of(r),
                detail::cat(what, " [nccl]: rank 0: ", detail::nccl::nccl_text(r, "ncclGetUniqueId")), msg.status);
  }
  auto made = make_from_unique_id(msg.id, static_cast<std::size_t>(size), static_cast<std::size_t>(rank), device, options);
  if (!made) return fail(made.error().code, detail::cat(what, " -> ", made.error().message), made.error().native);
  return made;
}

#endif

POLYCOLL_DETAIL_LIB_INLINE void Nccl::abort_impl(const Error&) const noexcept {
  if (e_ && e_->native() != nullptr) (void)ncclCommAbort(e_->native());
}

POLYCOLL_DETAIL_LIB_INLINE Status Nccl::check_devices(std::string_view what, std::span<const int> devices) {
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    return fail(detail::nccl::errc_of(e) == Errc::invalid_argument ? Errc::backend_failure : detail::nccl::errc_of(e),
                detail::cat(what, " [nccl]: ", detail::nccl::cuda_text(e, "cudaGetDeviceCount")), static_cast<int>(e));
  }
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] < 0 || devices[i] >= count) {
      return fail(Errc::invalid_argument,
                  detail::cat(what, " [nccl]: device ", devices[i], " does not exist (", count, " visible)"));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (devices[j] == devices[i]) {
        return fail(Errc::invalid_argument, detail::cat(what, " [nccl]: device ", devices[i],
                                                        " appears twice; NCCL needs one GPU per rank"));
      }
    }
  }
  return {};
}

POLYCOLL_DETAIL_LIB_INLINE Status Nccl::settle_all(std::string_view what, std::span<ncclComm_t> comms, const Options& options) {
  const auto deadline = detail::deadline_after(options.op_timeout);
  for (std::size_t i = 0; i < comms.size(); ++i) {
    const detail::nccl::Settled s = detail::nccl::settle(comms[i], deadline);
    if (s.timed_out || s.result != ncclSuccess) {
      const std::string text =
          s.timed_out ? detail::cat("rank ", i, " did not finish initialising within op_timeout (",
                                    options.op_timeout->count(), " ms): did every rank join?")
                      : detail::cat("rank ", i, ": ", detail::nccl::nccl_text(s.result, "ncclCommInitRankConfig", comms[i]));
      abort_all(comms);
      return fail(s.timed_out ? Errc::timeout : detail::nccl::errc_of(s.result), detail::cat(what, " [nccl]: ", text),
                  static_cast<int>(s.result));
    }
  }
  return {};
}

POLYCOLL_DETAIL_LIB_INLINE void Nccl::abort_all(std::span<ncclComm_t> comms) noexcept {
  for (ncclComm_t& c : comms) {
    if (c != nullptr) (void)ncclCommAbort(c);
    c = nullptr;
  }
}

POLYCOLL_DETAIL_LIB_INLINE Status Nccl::moved_from(const detail::CallDesc& c) const {
  return tl::unexpected(detail::call_error(Errc::invalid_argument, c, 0, 0, backend_name, "moved-from communicator"));
}

POLYCOLL_DETAIL_LIB_INLINE std::size_t Nccl::world_size_impl() const noexcept { return e_ ? e_->size() : 1; }

POLYCOLL_DETAIL_LIB_INLINE std::size_t Nccl::rank_impl() const noexcept { return e_ ? e_->rank() : 0; }

POLYCOLL_DETAIL_LIB_INLINE Status Nccl::unordered(const detail::CallDesc& c) const {
  return tl::unexpected(this->error(
      Errc::unsupported, c,
      "Options::reproducible (or POLYCOLL_REPRODUCIBLE=1) cannot be honoured above one rank: NCCL chooses its own "
      "reduction order (docs/reliability.md, \"Reproducible reductions\")"));
}

POLYCOLL_DETAIL_LIB_INLINE Status Nccl::group_start_impl() {
  const auto c = detail::CallDesc::plain(detail::Call::group_start);
  if (!e_) return moved_from(c);
  return e_->group_start(c);
}

POLYCOLL_DETAIL_LIB_INLINE Status Nccl::group_end_impl() {
  const auto c = detail::CallDesc::plain(detail::Call::group_end);
  if (!e_) return moved_from(c);
  return e_->group_end(c);
}

POLYCOLL_DETAIL_LIB_INLINE Status Nccl::sync_impl() {
  const auto c = detail::CallDesc::plain(detail::Call::sync);
  if (!e_) return moved_from(c);
  return e_->sync(c);
}

POLYCOLL_DETAIL_LIB_INLINE Status Nccl::barrier_impl() {
  const auto c = detail::CallDesc::plain(detail::Call::barrier);
  if (!e_) return moved_from(c);
  return e_->barrier(c);
}

POLYCOLL_DETAIL_LIB_INLINE Result<std::optional<Nccl>> Nccl::split_impl(std::uint32_t color, std::uint32_t key) {
  const auto c = detail::CallDesc::plain(detail::Call::split);
  if (!e_) return tl::unexpected(moved_from(c).error());
  auto r = e_->split(c, color, key);
  if (!r) return tl::unexpected(std::move(r.error()));
  if (!*r) return std::optional<Nccl>{};
  return std::optional<Nccl>{Nccl(std::move(*r))};
}

POLYCOLL_DETAIL_LIB_INLINE StreamSyncOps* Nccl::as_stream_sync_impl() noexcept { return e_.get(); }

template <DType D, ReduceOp Op>
ncclRedOp_t Nccl::nccl_op() const noexcept {
  if constexpr (Op == ReduceOp::Avg) {
    if (world_size_impl() == 1) return ncclSum;
  }
  return detail::nccl::red_op<D, Op>();
}

template <DType D>
bool Nccl::ordered_refused() const noexcept {
  constexpr auto cat = dtype_tag<D>::category;
  if constexpr (cat == DTypeCategory::floating || cat == DTypeCategory::complex) {
    return e_->options().reproducible && world_size_impl() > 1;
  } else {
    return false;
  }
}

template <DType D, ReduceOp Op, class T>
Status Nccl::all_reduce_impl(dtype_tag<D>, op_tag<Op>, T* buf, std::size_t count) {
  const auto c = detail::CallDesc::reduction(detail::Call::all_reduce, count, D, Op);
  if (!e_) return moved_from(c);
  if (ordered_refused<D>()) [[unlikely]] return unordered(c);
  return e_->submit(c, {{buf, "buffer"}}, "ncclAllReduce", [&](ncclComm_t comm, cudaStream_t s) {
    return ncclAllReduce(buf, buf, count * map<D>::scale, map<D>::type, nccl_op<D, Op>(), comm, s);
  });
}

template <DType D, ReduceOp Op, class T>
Status Nccl::all_reduce_impl(dtype_tag<D>, op_tag<Op>, const T* send, T* recv, std::size_t count) {
  const auto c = detail::CallDesc::reduction(detail::Call::all_reduce, count, D, Op);
  if (!e_) return moved_from(c);
  if (ordered_refused<D>()) [[unlikely]] return unordered(c);
  return e_->submit(c, {{send, "send buffer"}, {recv, "recv buffer"}}, "ncclAllReduce",
                    [&](ncclComm_t comm, cudaStream_t s) {
                      return ncclAllReduce(send, recv, count * map<D>::scale, map<D>::type, nccl_op<D, Op>(),
                                           comm, s);
                    });
}

template <DType D, ReduceOp Op, class T>
Status Nccl::all_reduce_value_impl(dtype_tag<D>, op_tag<Op>, T* value) {
  const auto c = detail::CallDesc::reduction(detail::Call::all_reduce, 1, D, Op);
  if (!e_) return moved_from(c);
  if (ordered_refused<D>()) [[unlikely]] return unordered(c);
  static_assert(sizeof(T) <= 16, "the scratch slot holds one element of at most 16 bytes");
  return e_->all_reduce_value(c, value, sizeof(T), map<D>::scale, map<D>::type, nccl_op<D, Op>());
}

template <DType D, class T>
Status Nccl::broadcast_impl(dtype_tag<D>, T* buf, std::size_t count, std::size_t root) {
  const auto c = detail::CallDesc::rooted(detail::Call::broadcast, count, D, root);
  if (!e_) return moved_from(c);
  return e_->submit(c, {{buf, "buffer"}}, "ncclBroadcast", [&](ncclComm_t comm, cudaStream_t s) {
    return ncclBroadcast(buf, buf, count * map<D>::scale, map<D>::type, static_cast<int>(root), comm, s);
  });
}

template <DType D, class T>
Status Nccl::all_gather_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count) {
  const auto c = detail::CallDesc::movement(detail::Call::all_gather, count, D);
  if (!e_) return moved_from(c);
  return e_->submit(c, {{send, "send buffer"}, {recv, "recv buffer"}}, "ncclAllGather",
                    [&](ncclComm_t comm, cudaStream_t s) {
                      return ncclAllGather(send, recv, count * map<D>::scale, map<D>::type, comm, s);
                    });
}

template <DType D, ReduceOp Op, class T>
Status Nccl::reduce_scatter_impl(dtype_tag<D>, op_tag<Op>, const T* send, T* recv, std::size_t count) {
  const auto c = detail::CallDesc::reduction(detail::Call::reduce_scatter, count, D, Op);
  if (!e_) return moved_from(c);
  if (ordered_refused<D>()) [[unlikely]] return unordered(c);
  return e_->submit(c, {{send, "send buffer"}, {recv, "recv buffer"}}, "ncclReduceScatter",
                    [&](ncclComm_t comm, cudaStream_t s) {
                      return ncclReduceScatter(send, recv, count * map<D>::scale, map<D>::type, nccl_op<D, Op>(),
                                               comm, s);
                    });
}

template <DType D, ReduceOp Op, class T>
Status Nccl::reduce_impl(dtype_tag<D>, op_tag<Op>, const T* send, T* recv, std::size_t count,
                         std::size_t root) {
  auto c = detail::CallDesc::reduction(detail::Call::reduce, count, D, Op);
  c.root = root;
  if (!e_) return moved_from(c);
  if (ordered_refused<D>()) [[unlikely]] return unordered(c);
  // recv is null off the root, which NCCL allows there.
  return e_->submit(c, {{send, "send buffer"}, {recv, "recv buffer"}}, "ncclReduce",
                    [&](ncclComm_t comm, cudaStream_t s) {
                      return ncclReduce(send, recv, count * map<D>::scale, map<D>::type, nccl_op<D, Op>(),
                                        static_cast<int>(root), comm, s);
                    });
}

template <DType D, class T>
Status Nccl::gather_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count, std::size_t root) {
  const auto c = detail::CallDesc::rooted(detail::Call::gather, count, D, root);
  if (!e_) return moved_from(c);
  const std::size_t n = count * map<D>::scale, w = e_->size();
  return e_->submit(c, {{send, "send buffer"}, {recv, "recv buffer"}}, "ncclGather",
                    [&](ncclComm_t comm, cudaStream_t s) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
                      (void)w;
                      return ncclGather(send, recv, n, map<D>::type, static_cast<int>(root), comm, s);
#else
                      return grouped_p2p<D>(comm, s, [&](auto&& send_to, auto&& recv_from) {
                        send_to(send, n, root);
                        if (recv) {
                          for (std::size_t q = 0; q < w; ++q) recv_from(static_cast<T*>(recv) + q * count, n, q);
                        }
                      });
#endif
                    });
}

template <DType D, class T>
Status Nccl::scatter_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count, std::size_t root) {
  const auto c = detail::CallDesc::rooted(detail::Call::scatter, count, D, root);
  if (!e_) return moved_from(c);
  const std::size_t n = count * map<D>::scale, w = e_->size();
  return e_->submit(c, {{send, "send buffer"}, {recv, "recv buffer"}}, "ncclScatter",
                    [&](ncclComm_t comm, cudaStream_t s) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
                      (void)w;
                      return ncclScatter(send, recv, n, map<D>::type, static_cast<int>(root), comm, s);
#else
                      return grouped_p2p<D>(comm, s, [&](auto&& send_to, auto&& recv_from) {
                        if (send) {
                          for (std::size_t q = 0; q < w; ++q) send_to(send + q * count, n, q);
                        }
                        recv_from(recv, n, root);
                      });
#endif
                    });
}

template <DType D, class T>
Status Nccl::all_to_all_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count) {
  const auto c = detail::CallDesc::movement(detail::Call::all_to_all, count, D);
  if (!e_) return moved_from(c);
  const std::size_t n = count * map<D>::scale, w = e_->size();
  return e_->submit(c, {{send, "send buffer"}, {recv, "recv buffer"}}, "ncclAlltoAll",
                    [&](ncclComm_t comm, cudaStream_t s) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
                      (void)w;
                      return ncclAlltoAll(send, recv, n, map<D>::type, comm, s);
#else
                      return grouped_p2p<D>(comm, s, [&](auto&& send_to, auto&& recv_from) {
                        for (std::size_t q = 0; q < w; ++q) {
                          send_to(send + q * count, n, q);
                          recv_from(recv + q * count, n, q);
                        }
                      });
#endif
                    });
}

template <DType D, class T>
Status Nccl::all_gather_v_impl(dtype_tag<D>, const T* send, std::size_t send_count, T* recv,
                               const detail::VLayout& layout) {
  const auto c = detail::CallDesc::movement(detail::Call::all_gather_v, layout.total(), D);
  if (!e_) return moved_from(c);
  const std::size_t w = e_->size();
  return e_->submit(c, {{send_count ? send : nullptr, "send buffer"}, {c.count ? recv : nullptr, "recv buffer"}},
                    "ncclGroupEnd (all_gather_v)", [&](ncclComm_t comm, cudaStream_t s) {
                      return grouped_p2p<D>(comm, s, [&](auto&& send_to, auto&& recv_from) {
                        for (std::size_t q = 0; q < w; ++q) send_to(send, send_count * map<D>::scale, q);
                        layout.each([&](std::size_t q, std::size_t cnt, std::size_t displ) {
                          recv_from(recv + displ, cnt * map<D>::scale, q);
                        });
                      });
                    });
}

template <DType D, class T>
Status Nccl::all_to_all_v_impl(dtype_tag<D>, const T* send, const detail::VLayout& sl, T* recv,
                               const detail::VLayout& rl) {
  const auto c = detail::CallDesc::movement(detail::Call::all_to_all_v, detail::npos, D);
  if (!e_) return moved_from(c);
  return e_->submit(c, {{sl.total() ? send : nullptr, "send buffer"}, {rl.total() ? recv : nullptr, "recv buffer"}},
                    "ncclGroupEnd (all_to_all_v)", [&](ncclComm_t comm, cudaStream_t s) {
                      return grouped_p2p<D>(comm, s, [&](auto&& send_to, auto&& recv_from) {
                        sl.each([&](std::size_t q, std::size_t cnt, std::size_t displ) {
                          send_to(send + displ, cnt * map<D>::scale, q);
                        });
                        rl.each([&](std::size_t q, std::size_t cnt, std::size_t displ) {
                          recv_from(recv + displ, cnt * map<D>::scale, q);
                        });
                      });
                    });
}

template <DType D, class Body>
ncclResult_t Nccl::grouped_p2p(ncclComm_t comm, cudaStream_t s, Body&& body) {
  ncclResult_t first = ncclGroupStart();
  if (first != ncclSuccess) return first;
  auto keep = [&](ncclResult_t r) {
    if (r != ncclSuccess && r != ncclInProgress && first == ncclSuccess) first = r;
  };
  body([&](const void* p, std::size_t n, std::size_t peer) {
         if (n != 0) keep(ncclSend(p, n, map<D>::type, static_cast<int>(peer), comm, s));
       },
       [&](void* p, std::size_t n, std::size_t peer) {
         if (n != 0) keep(ncclRecv(p, n, map<D>::type, static_cast<int>(peer), comm, s));
       });
  const ncclResult_t end = ncclGroupEnd();
  return first != ncclSuccess ? first : end;
}

template <DType D, class T>
Status Nccl::send_impl(dtype_tag<D>, const T* buf, std::size_t count, std::size_t dest, std::uint32_t tag) {
  const auto c = detail::CallDesc::p2p(detail::Call::send, count, D, dest, tag);
  if (!e_) return moved_from(c);
  return e_->post(c, detail::nccl::P2p{true, const_cast<T*>(buf), count * map<D>::scale, map<D>::type,
                                       static_cast<int>(dest)});
}

template <DType D, class T>
Status Nccl::recv_impl(dtype_tag<D>, T* buf, std::size_t count, std::size_t src, std::uint32_t tag) {
  const auto c = detail::CallDesc::p2p(detail::Call::recv, count, D, src, tag);
  if (!e_) return moved_from(c);
  return e_->post(c, detail::nccl::P2p{false, buf, count * map<D>::scale, map<D>::type, static_cast<int>(src)});
}

}  // namespace polycoll
#endif
