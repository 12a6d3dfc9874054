#pragma once
/// @file any_communicator.hpp
/// AnyCommunicator: a move-only value holding any backend, for choosing the
/// backend at run time. One indirect call per operation, no allocation per
/// call (the backend object is allocated once, when the AnyCommunicator is made).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <polycoll/communicator.hpp>
#include <polycoll/group.hpp>

namespace polycoll {

class AnyCommunicator;

/// AnyCommunicator moves every dtype: whether the held backend does is its
/// own run-time answer (Errc::unsupported), as on the seed surface.
template <DType D>
struct supports_dtype<AnyCommunicator, D> : std::true_type {};
/// AnyCommunicator reduces every valid pair; see supports_dtype<AnyCommunicator, D>.
template <DType D, ReduceOp Op>
struct supports_reduction<AnyCommunicator, D, Op> : std::true_type {};
/// AnyCommunicator has probe: whether the held backend does is its run-time
/// answer (Errc::unsupported on Nccl), as on the seed surface.
template <>
struct supports_probe<AnyCommunicator> : std::true_type {};

namespace detail {
using Counts = std::span<const std::size_t>;
// One table of function pointers per backend type (AnyCommunicator's).
struct AnyVTable {
  std::string_view name;
  void (*destroy)(void*) noexcept = nullptr;
  std::size_t (*world_size)(const void*) noexcept = nullptr;
  std::size_t (*rank)(const void*) noexcept = nullptr;
  Status (*all_reduce)(void*, std::uint64_t, std::size_t, DType, ReduceOp) = nullptr;
  Status (*broadcast)(void*, std::uint64_t, std::size_t, DType, std::size_t) = nullptr;
  Status (*all_gather)(void*, std::uint64_t, std::uint64_t, std::size_t, DType) = nullptr;
  Status (*reduce_scatter)(void*, std::uint64_t, std::uint64_t, std::size_t, DType, ReduceOp) = nullptr;
  Status (*send)(void*, std::uint64_t, std::size_t, DType, std::size_t, std::uint32_t) = nullptr;
  Status (*recv)(void*, std::uint64_t, std::size_t, DType, std::size_t, std::uint32_t) = nullptr;
  Status (*sync)(void*) = nullptr;
  Status (*barrier)(void*) = nullptr;
  Result<std::optional<AnyCommunicator>> (*split)(void*, std::uint32_t, std::uint32_t) = nullptr;
  StreamSyncOps* (*as_stream_sync)(void*) noexcept = nullptr;
  Status (*reduce)(void*, std::uint64_t, std::uint64_t, std::size_t, DType, ReduceOp, std::size_t) = nullptr;
  Status (*gather)(void*, std::uint64_t, std::uint64_t, std::size_t, DType, std::size_t) = nullptr;
  Status (*scatter)(void*, std::uint64_t, std::uint64_t, std::size_t, DType, std::size_t) = nullptr;
  Status (*all_to_all)(void*, std::uint64_t, std::uint64_t, std::size_t, DType) = nullptr;
  Status (*all_gather_v)(void*, std::uint64_t, std::size_t, std::uint64_t, Counts, Counts, DType) = nullptr;
  Status (*all_to_all_v)(void*, std::uint64_t, Counts, Counts, std::uint64_t, Counts, Counts, DType) = nullptr;
  Status (*send_recv)(void*, std::uint64_t, std::size_t, std::size_t, std::uint64_t, std::size_t, std::size_t, DType,
                      std::uint32_t) = nullptr;
  Status (*group_start)(void*) = nullptr;
  Status (*group_end)(void*) = nullptr;
  Result<std::optional<MessageInfo>> (*probe)(void*, std::size_t, std::uint32_t, DType) = nullptr;
  Status (*all_reduce_out)(void*, std::uint64_t, std::uint64_t, std::size_t, DType, ReduceOp) = nullptr;
  Status (*all_reduce_value)(void*, std::uint64_t, DType, ReduceOp) = nullptr;
  OnError (*on_error)(const void*) noexcept = nullptr;
  void (*abort_ranks)(const void*, const Error&) noexcept = nullptr;
  std::vector<CallRecord> (*flight_record)(const void*) = nullptr;
};
}  // namespace detail

/// A type-erased communicator. Its seed surface forwards through one table
/// per backend type; as a `Communicator<AnyCommunicator>` it also has the
/// typed surface, whose calls check their spans and then take the same table
/// (so generic code taking `Communicator<B>&` accepts it).
class AnyCommunicator : public Communicator<AnyCommunicator> {
  using Base = Communicator<AnyCommunicator>;

 public:
  // The typed surface of Communicator; the seed overloads declared below hide
  // the base's, so seed calls go straight to the table.
  using Base::all_gather;
  using Base::all_gather_v;
  using Base::all_reduce;
  using Base::all_reduce_value;
  using Base::all_to_all;
  using Base::all_to_all_v;
  using Base::broadcast;
  using Base::gather;
  using Base::probe;
  using Base::recv;
  using Base::reduce;
  using Base::reduce_scatter;
  using Base::scatter;
  using Base::send;
  using Base::send_recv;

  /// Takes ownership of a backend: `AnyCommunicator any{std::move(comm)};`
  template <class B>
    requires(CommunicatorBackend<std::remove_cvref_t<B>> && !std::is_lvalue_reference_v<B>)
  explicit AnyCommunicator(B&& backend)
      : object_(new std::remove_cvref_t<B>(std::move(backend))), vtable_(&vtable_of<std::remove_cvref_t<B>>()) {}

  /// Takes over `other`'s backend; `other` is left empty (has_value() is false).
  AnyCommunicator(AnyCommunicator&& other) noexcept
      : Base(std::move(other)),
        object_(std::exchange(other.object_, nullptr)),
        vtable_(std::exchange(other.vtable_, &empty_vtable)) {}
  /// Releases the held backend (drop contract), then takes over `other`'s.
  AnyCommunicator& operator=(AnyCommunicator&& other) noexcept {
    if (this != &other) {
      reset();
      object_ = std::exchange(other.object_, nullptr);
      vtable_ = std::exchange(other.vtable_, &empty_vtable);
    }
    return *this;
  }
  AnyCommunicator(const AnyCommunicator&) = delete;
  AnyCommunicator& operator=(const AnyCommunicator&) = delete;
  ~AnyCommunicator() { reset(); }

  /// False only for a moved-from AnyCommunicator (whose operations return Errc::invalid_argument).
  [[nodiscard]] bool has_value() const noexcept { return object_ != nullptr; }
  /// Number of ranks (0 when moved-from).
  [[nodiscard]] std::size_t world_size() const noexcept { return object_ ? vtable_->world_size(object_) : 0; }
  /// This rank.
  [[nodiscard]] std::size_t rank() const noexcept { return object_ ? vtable_->rank(object_) : 0; }
  /// The held backend's name ("noop", "threads", "mpi", "nccl").
  [[nodiscard]] std::string_view backend_name() const noexcept { return vtable_->name; }

  /// See Communicator::all_reduce.
  [[nodiscard]] Status all_reduce(std::uint64_t ptr, std::size_t count, DType dtype, ReduceOp op) {
    if (!object_) return moved_from("all_reduce");
    return vtable_->all_reduce(object_, ptr, count, dtype, op);
  }
  /// See Communicator::all_reduce (out of place).
  [[nodiscard]] Status all_reduce(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype,
                                  ReduceOp op) {
    if (!object_) return moved_from("all_reduce");
    return vtable_->all_reduce_out(object_, send, recv, count, dtype, op);
  }
  /// See Communicator::all_reduce_value (seed form).
  [[nodiscard]] Status all_reduce_value(std::uint64_t value, DType dtype, ReduceOp op) {
    if (!object_) return moved_from("all_reduce_value");
    return vtable_->all_reduce_value(object_, value, dtype, op);
  }
  /// See Communicator::broadcast.
  [[nodiscard]] Status broadcast(std::uint64_t ptr, std::size_t count, DType dtype, std::size_t root) {
    if (!object_) return moved_from("broadcast");
    return vtable_->broadcast(object_, ptr, count, dtype, root);
  }
  /// See Communicator::all_gather.
  [[nodiscard]] Status all_gather(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype) {
    if (!object_) return moved_from("all_gather");
    return vtable_->all_gather(object_, send, recv, count, dtype);
  }
  /// See Communicator::reduce_scatter.
  [[nodiscard]] Status reduce_scatter(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype,
                                      ReduceOp op) {
    if (!object_) return moved_from("reduce_scatter");
    return vtable_->reduce_scatter(object_, send, recv, count, dtype, op);
  }
  /// See Communicator::send.
  [[nodiscard]] Status send(std::uint64_t ptr, std::size_t count, DType dtype, std::size_t dest, std::uint32_t tag) {
    if (!object_) return moved_from("send");
    return vtable_->send(object_, ptr, count, dtype, dest, tag);
  }
  /// See Communicator::recv.
  [[nodiscard]] Status recv(std::uint64_t ptr, std::size_t count, DType dtype, std::size_t src, std::uint32_t tag) {
    if (!object_) return moved_from("recv");
    return vtable_->recv(object_, ptr, count, dtype, src, tag);
  }
  /// See Communicator::probe.
  [[nodiscard]] Result<std::optional<MessageInfo>> probe(std::size_t src, std::uint32_t tag, DType dtype) {
    if (!object_) return moved_from("probe");
    return vtable_->probe(object_, src, tag, dtype);
  }
  /// See Communicator::reduce.
  [[nodiscard]] Status reduce(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype, ReduceOp op,
                              std::size_t root) {
    if (!object_) return moved_from("reduce");
    return vtable_->reduce(object_, send, recv, count, dtype, op, root);
  }
  /// See Communicator::gather.
  [[nodiscard]] Status gather(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype,
                              std::size_t root) {
    if (!object_) return moved_from("gather");
    return vtable_->gather(object_, send, recv, count, dtype, root);
  }
  /// See Communicator::scatter.
  [[nodiscard]] Status scatter(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype,
                               std::size_t root) {
    if (!object_) return moved_from("scatter");
    return vtable_->scatter(object_, send, recv, count, dtype, root);
  }
  /// See Communicator::all_to_all.
  [[nodiscard]] Status all_to_all(std::uint64_t send, std::uint64_t recv, std::size_t count, DType dtype) {
    if (!object_) return moved_from("all_to_all");
    return vtable_->all_to_all(object_, send, recv, count, dtype);
  }
  /// See Communicator::all_gather_v.
  [[nodiscard]] Status all_gather_v(std::uint64_t send, std::size_t send_count, std::uint64_t recv,
                                    std::span<const std::size_t> recv_counts, std::span<const std::size_t> displs,
                                    DType dtype) {
    if (!object_) return moved_from("all_gather_v");
    return vtable_->all_gather_v(object_, send, send_count, recv, recv_counts, displs, dtype);
  }
  /// See Communicator::all_to_all_v.
  [[nodiscard]] Status all_to_all_v(std::uint64_t send, std::span<const std::size_t> send_counts,
                                    std::span<const std::size_t> send_displs, std::uint64_t recv,
                                    std::span<const std::size_t> recv_counts,
                                    std::span<const std::size_t> recv_displs, DType dtype) {
    if (!object_) return moved_from("all_to_all_v");
    return vtable_->all_to_all_v(object_, send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype);
  }
  /// See Communicator::send_recv.
  [[nodiscard]] Status send_recv(std::uint64_t send, std::size_t send_count, std::size_t dest, std::uint64_t recv,
                                 std::size_t recv_count, std::size_t src, DType dtype, std::uint32_t tag) {
    if (!object_) return moved_from("send_recv");
    return vtable_->send_recv(object_, send, send_count, dest, recv, recv_count, src, dtype, tag);
  }
  /// See Communicator::group_start.
  [[nodiscard]] Status group_start() {
    if (!object_) return moved_from("group_start");
    return vtable_->group_start(object_);
  }
  /// See Communicator::group_end.
  [[nodiscard]] Status group_end() {
    if (!object_) return moved_from("group_end");
    return vtable_->group_end(object_);
  }
  /// See Communicator::group.
  [[nodiscard]] Group<AnyCommunicator> group() { return Group<AnyCommunicator>(*this); }
  /// See Communicator::sync.
  [[nodiscard]] Status sync() {
    if (!object_) return moved_from("sync");
    return vtable_->sync(object_);
  }
  /// See Communicator::barrier.
  [[nodiscard]] Status barrier() {
    if (!object_) return moved_from("barrier");
    return vtable_->barrier(object_);
  }
  /// See Communicator::split; the parts hold the same backend.
  [[nodiscard]] Result<std::optional<AnyCommunicator>> split(std::uint32_t color, std::uint32_t key) {
    if (!object_) return moved_from("split");
    return vtable_->split(object_, color, key);
  }
  /// See Communicator::as_stream_sync.
  [[nodiscard]] StreamSyncOps* as_stream_sync() noexcept {
    return object_ ? vtable_->as_stream_sync(object_) : nullptr;
  }

  /// The held backend if it is a `B`, else nullptr (like std::function::target).
  template <class B>
  [[nodiscard]] B* target() noexcept {
    return vtable_ == &vtable_of<B>() ? static_cast<B*>(object_) : nullptr;
  }
  /// Const form of target().
  template <class B>
  [[nodiscard]] const B* target() const noexcept {
    return vtable_ == &vtable_of<B>() ? static_cast<const B*>(object_) : nullptr;
  }

 private:
  friend class Communicator<AnyCommunicator>;
  using Counts = detail::Counts;
  using VTable = detail::AnyVTable;

  // The backend interface of Communicator<AnyCommunicator>: after the typed
  // call's checks, each *_impl goes through the table like the seed call.
  std::size_t world_size_impl() const noexcept { return world_size(); }
  std::size_t rank_impl() const noexcept { return rank(); }
  template <class T>
  static std::uint64_t addr(T* p) noexcept {
    return detail::to_address(p);
  }
  static Counts counts_of(const detail::VLayout& l) noexcept { return Counts(l.counts, l.n); }
  static Counts displs_of(const detail::VLayout& l) noexcept { return l.displs ? Counts(l.displs, l.n) : Counts{}; }

  template <DType D, ReduceOp Op, class T>
  Status all_reduce_impl(dtype_tag<D>, op_tag<Op>, T* buf, std::size_t count) {
    return all_reduce(addr(buf), count, D, Op);
  }
  template <DType D, ReduceOp Op, class T>
  Status all_reduce_impl(dtype_tag<D>, op_tag<Op>, const T* send, T* recv, std::size_t count) {
    return all_reduce(addr(send), addr(recv), count, D, Op);
  }
  // Returns complete: the held backend's all_reduce_value, with its rules.
  template <DType D, ReduceOp Op, class T>
  Status all_reduce_value_impl(dtype_tag<D>, op_tag<Op>, T* value) {
    return all_reduce_value(addr(value), D, Op);
  }
  template <DType D, class T>
  Status broadcast_impl(dtype_tag<D>, T* buf, std::size_t count, std::size_t root) {
    return broadcast(addr(buf), count, D, root);
  }
  template <DType D, class T>
  Status all_gather_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count) {
    return all_gather(addr(send), addr(recv), count, D);
  }
  template <DType D, ReduceOp Op, class T>
  Status reduce_scatter_impl(dtype_tag<D>, op_tag<Op>, const T* send, T* recv, std::size_t count) {
    return reduce_scatter(addr(send), addr(recv), count, D, Op);
  }
  template <DType D, class T>
  Status send_impl(dtype_tag<D>, const T* buf, std::size_t count, std::size_t dest, std::uint32_t tag) {
    return send(addr(buf), count, D, dest, tag);
  }
  template <DType D, class T>
  Status recv_impl(dtype_tag<D>, T* buf, std::size_t count, std::size_t src, std::uint32_t tag) {
    return recv(addr(buf), count, D, src, tag);
  }
  template <DType D, ReduceOp Op, class T>
  Status reduce_impl(dtype_tag<D>, op_tag<Op>, const T* send, T* recv, std::size_t count, std::size_t root) {
    return reduce(addr(send), addr(recv), count, D, Op, root);
  }
  template <DType D, class T>
  Status gather_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count, std::size_t root) {
    return gather(addr(send), addr(recv), count, D, root);
  }
  template <DType D, class T>
  Status scatter_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count, std::size_t root) {
    return scatter(addr(send), addr(recv), count, D, root);
  }
  template <DType D, class T>
  Status all_to_all_impl(dtype_tag<D>, const T* send, T* recv, std::size_t count) {
    return all_to_all(addr(send), addr(recv), count, D);
  }
  template <DType D, class T>
  Status all_gather_v_impl(dtype_tag<D>, const T* send, std::size_t send_count, T* recv, const detail::VLayout& l) {
    return all_gather_v(addr(send), send_count, addr(recv), counts_of(l), displs_of(l), D);
  }
  template <DType D, class T>
  Status all_to_all_v_impl(dtype_tag<D>, const T* send, const detail::VLayout& sl, T* recv,
                           const detail::VLayout& rl) {
    return all_to_all_v(addr(send), counts_of(sl), displs_of(sl), addr(recv), counts_of(rl), displs_of(rl), D);
  }
  // Only the base's seed probe (never called: the seed probe above hides it)
  // reaches this; bytes are the count of U8 elements.
  Result<std::optional<detail::Envelope>> probe_impl(std::size_t src, std::uint32_t tag) {
    auto r = probe(src, tag, DType::U8);
    if (!r) return tl::unexpected(std::move(r.error()));
    if (!r->has_value()) return std::optional<detail::Envelope>{};
    return std::optional<detail::Envelope>{detail::Envelope{(*r)->source, (*r)->tag, (*r)->count}};
  }
  Status group_start_impl() { return group_start(); }
  Status group_end_impl() { return group_end(); }
  Status sync_impl() { return sync(); }
  Status barrier_impl() { return barrier(); }
  Result<std::optional<AnyCommunicator>> split_impl(std::uint32_t color, std::uint32_t key) { return split(color, key); }
  StreamSyncOps* as_stream_sync_impl() noexcept { return as_stream_sync(); }
  // The held backend's Options::on_error and abort (a moved-from AnyCommunicator returns its errors).
  OnError on_error_impl() const noexcept { return object_ ? vtable_->on_error(object_) : OnError::return_error; }
  // flight_record(): the held backend's ring (it records each call once);
  // empty when moved-from.
  std::vector<CallRecord> flight_record_impl() const {
    return object_ ? vtable_->flight_record(object_) : std::vector<CallRecord>{};
  }
  void abort_impl(const Error& e) const noexcept {
    if (object_) vtable_->abort_ranks(object_, e);
  }


  template <class B>
  static B& as(void* p) noexcept {
    return *static_cast<B*>(p);
  }
  // The held B's front end, whose on_error members AnyCommunicator may use (a friend).
  template <class B>
  static const Communicator<B>& front(const void* p) noexcept {
    return *static_cast<const B*>(p);
  }

  template <class B>
  static constexpr VTable make_vtable() noexcept {
    return VTable{
        B::backend_name,
        [](void* p) noexcept { delete static_cast<B*>(p); },
        [](const void* p) noexcept { return static_cast<const B*>(p)->world_size(); },
        [](const void* p) noexcept { return static_cast<const B*>(p)->rank(); },
        [](void* p, std::uint64_t a, std::size_t n, DType d, ReduceOp o) { return as<B>(p).all_reduce(a, n, d, o); },
        [](void* p, std::uint64_t a, std::size_t n, DType d, std::size_t r) { return as<B>(p).broadcast(a, n, d, r); },
        [](void* p, std::uint64_t s, std::uint64_t r, std::size_t n, DType d) {
          return as<B>(p).all_gather(s, r, n, d);
        },
        [](void* p, std::uint64_t s, std::uint64_t r, std::size_t n, DType d, ReduceOp o) {
          return as<B>(p).reduce_scatter(s, r, n, d, o);
        },
        [](void* p, std::uint64_t a, std::size_t n, DType d, std::size_t peer, std::uint32_t t) {
          return as<B>(p).send(a, n, d, peer, t);
        },
        [](void* p, std::uint64_t a, std::size_t n, DType d, std::size_t peer, std::uint32_t t) {
          return as<B>(p).recv(a, n, d, peer, t);
        },
        [](void* p) { return as<B>(p).sync(); },
        [](void* p) { return as<B>(p).barrier(); },
        [](void* p, std::uint32_t color, std::uint32_t key) -> Result<std::optional<AnyCommunicator>> {
          auto r = as<B>(p).split(color, key);
          if (!r) return tl::unexpected(std::move(r.error()));
          if (!r->has_value()) return std::optional<AnyCommunicator>{};
          return std::optional<AnyCommunicator>{AnyCommunicator(std::move(**r))};
        },
        [](void* p) noexcept { return as<B>(p).as_stream_sync(); },
        [](void* p, std::uint64_t s, std::uint64_t r, std::size_t n, DType d, ReduceOp o, std::size_t root) {
          return as<B>(p).reduce(s, r, n, d, o, root);
        },
        [](void* p, std::uint64_t s, std::uint64_t r, std::size_t n, DType d, std::size_t root) {
          return as<B>(p).gather(s, r, n, d, root);
        },
        [](void* p, std::uint64_t s, std::uint64_t r, std::size_t n, DType d, std::size_t root) {
          return as<B>(p).scatter(s, r, n, d, root);
        },
        [](void* p, std::uint64_t s, std::uint64_t r, std::size_t n, DType d) {
          return as<B>(p).all_to_all(s, r, n, d);
        },
        [](void* p, std::uint64_t s, std::size_t n, std::uint64_t r, Counts counts, Counts displs, DType d) {
          return as<B>(p).all_gather_v(s, n, r, counts, displs, d);
        },
        [](void* p, std::uint64_t s, Counts sc, Counts sd, std::uint64_t r, Counts rc, Counts rd, DType d) {
          return as<B>(p).all_to_all_v(s, sc, sd, r, rc, rd, d);
        },
        [](void* p, std::uint64_t s, std::size_t sn, std::size_t dest, std::uint64_t r, std::size_t rn,
           std::size_t src, DType d, std::uint32_t t) { return as<B>(p).send_recv(s, sn, dest, r, rn, src, d, t); },
        [](void* p) { return as<B>(p).group_start(); },
        [](void* p) { return as<B>(p).group_end(); },
        [](void* p, std::size_t src, std::uint32_t t, DType d) { return as<B>(p).probe(src, t, d); },
        [](void* p, std::uint64_t s, std::uint64_t r, std::size_t n, DType d, ReduceOp o) {
          return as<B>(p).all_reduce(s, r, n, d, o);
        },
        [](void* p, std::uint64_t v, DType d, ReduceOp o) { return as<B>(p).all_reduce_value(v, d, o); },
        // Options::on_error of the held backend governs the typed surface's checks too.
        [](const void* p) noexcept { return front<B>(p).on_error_setting(); },
        [](const void* p, const Error& e) noexcept { front<B>(p).abort_ranks(e); },
        [](const void* p) { return static_cast<const B*>(p)->flight_record(); },
    };
  }

  // B's table, one object per program (target() compares its address). A
  // function, not a variable, and not inline: the shipped backends' headers
  // declare it `extern template` for their backend, so libpolycoll holds
  // their tables and a TU that wraps one compiles none of its entries.
  template <class B>
  static const VTable& vtable_of() noexcept;

  static constexpr VTable empty_vtable{.name = "none"};

  static tl::unexpected<Error> moved_from(std::string_view call) {
    return fail(Errc::invalid_argument, detail::cat(call, " on a moved-from AnyCommunicator"));
  }

  void reset() noexcept {
    if (object_) vtable_->destroy(object_);
    object_ = nullptr;
  }

  void* object_ = nullptr;
  const VTable* vtable_ = &empty_vtable;
};

template <class B>
const AnyCommunicator::VTable& AnyCommunicator::vtable_of() noexcept {
  static constexpr VTable table = make_vtable<B>();
  return table;
}

}  // namespace polycoll
