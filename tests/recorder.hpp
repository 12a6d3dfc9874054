#pragma once
// Recorder: a test backend (world of `world`, rank `rank`) that performs no
// communication and records which *_impl the front end reached, with which
// tags and arguments. It supports every (dtype, op) pair except f16
// reductions, and moves every dtype except i16: the gaps exercise the
// capability traits.

#include <polycoll/communicator.hpp>

#include <optional>
#include <string>
#include <vector>

namespace polycoll::test {

class Recorder;

}  // namespace polycoll::test

template <polycoll::DType D>
struct polycoll::supports_dtype<polycoll::test::Recorder, D> : std::bool_constant<D != polycoll::DType::I16> {};
template <polycoll::DType D, polycoll::ReduceOp Op>
struct polycoll::supports_reduction<polycoll::test::Recorder, D, Op>
    : std::bool_constant<polycoll::is_valid_v<D, Op> && D != polycoll::DType::F16> {};

namespace polycoll::test {

struct Record {
  std::string call;
  DType dtype = DType::U8;
  std::optional<ReduceOp> op;
  std::uint64_t a = 0, b = 0;
  std::size_t count = 0, peer = 0;
  std::uint32_t tag = 0;
};

class Recorder : public Communicator<Recorder> {
 public:
  static constexpr std::string_view backend_name = "recorder";
  Recorder(std::size_t world, std::size_t rank) : world_(world), rank_(rank) {}
  std::vector<Record> records;

 private:
  friend class Communicator<Recorder>;
  std::size_t world_size_impl() const noexcept { return world_; }
  std::size_t rank_impl() const noexcept { return rank_; }

  template <DType D, ReduceOp Op, class T>
  Status all_reduce_impl(dtype_tag<D>, op_tag<Op>, T* p, std::size_t n) {
    static_assert(std::is_same_v<T, typename dtype_tag<D>::type>);
    records.push_back({"all_reduce", D, Op, detail::to_address(p), 0, n, 0, 0});
    return {};
  }
  template <DType D, class T>
  Status broadcast_impl(dtype_tag<D>, T* p, std::size_t n, std::size_t root) {
    records.push_back({"broadcast", D, std::nullopt, detail::to_address(p), 0, n, root, 0});
    return {};
  }
  template <DType D, class T>
  Status all_gather_impl(dtype_tag<D>, const T* s, T* r, std::size_t n) {
    records.push_back({"all_gather", D, std::nullopt, detail::to_address(s), detail::to_address(r), n, 0, 0});
    return {};
  }
  template <DType D, ReduceOp Op, class T>
  Status reduce_scatter_impl(dtype_tag<D>, op_tag<Op>, const T* s, T* r, std::size_t n) {
    records.push_back({"reduce_scatter", D, Op, detail::to_address(s), detail::to_address(r), n, 0, 0});
    return {};
  }
  template <DType D, class T>
  Status send_impl(dtype_tag<D>, const T* p, std::size_t n, std::size_t dest, std::uint32_t tag) {
    records.push_back({"send", D, std::nullopt, detail::to_address(p), 0, n, dest, tag});
    return {};
  }
  template <DType D, class T>
  Status recv_impl(dtype_tag<D>, T* p, std::size_t n, std::size_t src, std::uint32_t tag) {
    records.push_back({"recv", D, std::nullopt, detail::to_address(p), 0, n, src, tag});
    return {};
  }
  Status sync_impl() {
    records.push_back({"sync", DType::U8, std::nullopt, 0, 0, 0, 0, 0});
    return {};
  }
  Status barrier_impl() {
    records.push_back({"barrier", DType::U8, std::nullopt, 0, 0, 0, 0, 0});
    return {};
  }
  Result<std::optional<Recorder>> split_impl(std::uint32_t color, std::uint32_t) {
    if (color == no_color) return std::optional<Recorder>{};
    return std::optional<Recorder>{Recorder(1, 0)};
  }

  std::size_t world_;
  std::size_t rank_;
};

}  // namespace polycoll::test
