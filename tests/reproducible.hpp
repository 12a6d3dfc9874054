#pragma once
// The specification of Options::reproducible, shared by the backend suites:
// every reduction (all_reduce in place, out of place and by value, reduce,
// reduce_scatter) returns the bits of the rank-order fold
// ((x0 OP x1) OP x2) ... OP x(p-1) (then / p for avg), computed here from the
// same inputs with one binary step at a time. Every backend and path that
// passes therefore gives the same bits as every other.
//
// The inputs are chosen so that another order shows: magnitudes from 2^-12 to
// 2^12 with both signs (a sum in another order rounds differently), and every
// fifth element +0 on even ranks and -0 on odd ones (min and max order
// -0 < +0, so a path whose min or max kept the zero of one operand position
// shows). No NaN: which NaN payload survives is unspecified
// (docs/reliability.md).
//
// check() makes no Catch2 assertion, so rank threads may call it: it returns
// the first difference or error as text, empty when everything matched. A
// failed call is noted like a wrong result and the calls go on, so that every
// rank makes the same calls whatever fails where.

#include <polycoll/communicator.hpp>
#include <polycoll/kernels/reduce.hpp>

#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace polycoll::test::reproducible {

inline std::uint64_t mix(std::uint64_t h) {
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  h *= 0x94D049BB133111EBull;
  return h ^ (h >> 32);
}

// Rank `rank`'s element i of input `salt`, as a float.
inline float value(std::size_t rank, std::size_t i, std::size_t salt, int max_exp) {
  if (i % 5 == 0) return rank % 2 == 0 ? 0.0f : -0.0f;
  const std::uint64_t h = mix((rank + 1) * 0x9E3779B97F4A7C15ull ^ mix((i + 1) ^ (salt << 40)));
  const float mantissa = 1.0f + static_cast<float>(h & 0xFFFFFF) / 16777216.0f;
  const int e = static_cast<int>((h >> 24) % static_cast<std::uint64_t>(2 * max_exp + 1)) - max_exp;
  return ((h >> 60) & 1 ? -1.0f : 1.0f) * std::ldexp(mantissa, e);
}

template <class T>
T element(std::size_t rank, std::size_t i, std::size_t salt) {
  if constexpr (std::is_same_v<T, std::complex<float>>) {
    return {value(rank, i, salt, 4), value(rank, i, salt + 1, 4)};
  } else if constexpr (std::is_same_v<T, double>) {
    const std::uint64_t h = mix(rank * 31 + i * 7 + salt);
    return static_cast<double>(value(rank, i, salt, 12)) * (1.0 + std::ldexp(static_cast<double>(h & 0xFFFF), -40));
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(mix(rank * 1000003 + i * 31 + salt));
  } else if constexpr (std::is_same_v<T, f16>) {
    return T(value(rank, i, salt, 6));  // f16 tops out at 65504
  } else {
    return T(value(rank, i, salt, 12));
  }
}

template <class T>
std::vector<T> inputs(std::size_t rank, std::size_t n, std::size_t salt) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = element<T>(rank, i, salt);
  return v;
}

// The rank-order fold of p ranks' inputs, one binary step at a time.
template <class T, ReduceOp Op>
std::vector<T> fold(std::size_t p, std::size_t n, std::size_t salt) {
  constexpr DType D = dtype_of_v<T>;
  std::vector<T> acc = inputs<T>(0, n, salt);
  for (std::size_t q = 1; q < p; ++q) {
    const std::vector<T> x = inputs<T>(q, n, salt);
    kernels::combine(dtype_tag<D>{}, op_tag<Op>{}, acc.data(), acc.data(), x.data(), n);
  }
  if constexpr (Op == ReduceOp::Avg) kernels::divide(dtype_tag<D>{}, acc.data(), n, p);
  return acc;
}

// "" when `got` holds the bits of `want` (from element `offset` of it).
template <class T>
std::string compare(const std::string& what, std::span<const T> got, const std::vector<T>& want, std::size_t offset,
                    std::size_t rank, std::size_t p) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[offset + i], sizeof(T)) != 0) {
      return what + " " + std::string(name(dtype_of_v<T>)) + " n=" + std::to_string(got.size()) +
             ": element " + std::to_string(i) + " differs from the rank-order fold (rank " + std::to_string(rank) +
             " of " + std::to_string(p) + ")";
    }
  }
  return {};
}

// Every reduction form of one (T, Op) at n elements on `comm`.
template <class T, ReduceOp Op, class Comm>
std::string check_one(Comm& comm, std::size_t n, std::size_t salt) {
  const std::size_t p = comm.world_size(), r = comm.rank();
  constexpr op_tag<Op> op{};
  auto label = [](const char* call) { return std::string(call) + " " + std::string(name(Op)); };
  auto failed = [&](const char* what, const Status& s) {
    return std::string(what) + " failed: " + s.error().message;
  };
  const std::vector<T> want = fold<T, Op>(p, n, salt);
  // A wrong result is noted and the calls go on, so that every rank makes the
  // same calls and a failure cannot leave a peer waiting.
  std::string e;
  auto note = [&](std::string found) {
    if (e.empty()) e = std::move(found);
  };

  // Runs `call` (a Status) and the sync after it; false, noted, if either failed.
  auto ran = [&](const char* what, auto&& call) {
    if (auto s = call(); !s) {
      note(failed(what, s));
      return false;
    }
    if (auto s = comm.sync(); !s) {
      note(failed("sync", s));
      return false;
    }
    return true;
  };

  std::vector<T> buf = inputs<T>(r, n, salt);
  if (ran("all_reduce", [&] { return comm.all_reduce(std::span(buf), op); })) {
    note(compare<T>(label("all_reduce"), buf, want, 0, r, p));
  }

  const std::vector<T> send = inputs<T>(r, n, salt);
  std::vector<T> recv(n);
  if (ran("all_reduce (out of place)", [&] { return comm.all_reduce(std::span(send), std::span(recv), op); })) {
    note(compare<T>(label("all_reduce (out of place)"), recv, want, 0, r, p));
  }

  const std::size_t root = salt % p;
  std::vector<T> at_root(r == root ? n : 0);
  if (ran("reduce", [&] { return comm.reduce(std::span(send), std::span(at_root), op, root); }) && r == root) {
    note(compare<T>(label("reduce"), at_root, want, 0, r, p));
  }
  // In place at the root: its recv is its send.
  buf = inputs<T>(r, n, salt);
  if (ran("reduce (in place)",
          [&] { return comm.reduce(std::span(buf), r == root ? std::span(buf) : std::span<T>(), op, root); }) &&
      r == root) {
    note(compare<T>(label("reduce (in place)"), buf, want, 0, r, p));
  }

  // reduce_scatter: p blocks of n per rank; rank r gets block r of the fold.
  const std::vector<T> whole = fold<T, Op>(p, p * n, salt);
  const std::vector<T> scattered = inputs<T>(r, p * n, salt);
  std::vector<T> mine(n);
  if (ran("reduce_scatter", [&] { return comm.reduce_scatter(std::span(scattered), std::span(mine), op); })) {
    note(compare<T>(label("reduce_scatter"), mine, whole, r * n, r, p));
  }
  // In place: recv is this rank's block of send (the seed surface's form);
  // the other blocks must come back as they were.
  std::vector<T> both = inputs<T>(r, p * n, salt);
  if (ran("reduce_scatter (in place)", [&] {
        return comm.reduce_scatter(detail::to_address(both.data()), detail::to_address(both.data() + r * n), n,
                                   dtype_of_v<T>, Op);
      })) {
    const std::span<const T> own(both.data() + r * n, n);
    note(compare<T>(label("reduce_scatter (in place)"), own, whole, r * n, r, p));
    const std::span<const T> all_of_it(both);
    note(compare<T>(label("reduce_scatter (in place), the blocks before its own"), all_of_it.first(r * n), scattered,
                    0, r, p));
    note(compare<T>(label("reduce_scatter (in place), the blocks after its own"), all_of_it.subspan((r + 1) * n),
                    scattered, (r + 1) * n, r, p));
  }

  if (n == 1) {
    auto v = comm.all_reduce_value(inputs<T>(r, 1, salt)[0], op);
    if (!v) {
      note(std::string("all_reduce_value failed: ") + v.error().message);
    } else {
      const T got = *v;
      note(compare<T>(label("all_reduce_value"), std::span(&got, 1), want, 0, r, p));
    }
  }
  return e;
}

// Element counts: empty, one, a few, and sizes on both sides of every
// backend's size thresholds up to 1.2 MB of f32 (Threads: its 16 KiB latency
// path; Mpi: the 64 KiB gather threshold of the reproducible path and, at 2
// ranks, the exchange, the window and MPI's own algorithms). 20000 and 20001
// split into uneven blocks at 3 and at 4 ranks respectively.
inline constexpr std::size_t sizes[] = {0, 1, 7, 1000, 20000, 20001, 300000};

// Every case; "" when every result matched the rank-order fold, else the
// first difference (every case still runs on every rank).
template <class Comm>
std::string check(Comm& comm) {
  std::string e;
  auto note = [&](std::string found) {
    if (e.empty()) e = std::move(found);
  };
  std::size_t salt = 0;
  for (const std::size_t n : sizes) {
    ++salt;
    note(check_one<float, ReduceOp::Sum>(comm, n, salt));
    note(check_one<float, ReduceOp::Min>(comm, n, salt));
    note(check_one<float, ReduceOp::Max>(comm, n, salt));
    note(check_one<bf16, ReduceOp::Sum>(comm, n, salt));
    if (n > 20000) continue;
    note(check_one<double, ReduceOp::Avg>(comm, n, salt));
    note(check_one<double, ReduceOp::Min>(comm, n, salt));
    note(check_one<f16, ReduceOp::Avg>(comm, n, salt));
    note(check_one<std::complex<float>, ReduceOp::Prod>(comm, n, salt));
    note(check_one<std::int32_t, ReduceOp::Sum>(comm, n, salt));
  }
  return e;
}

}  // namespace polycoll::test::reproducible
