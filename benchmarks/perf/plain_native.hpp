#pragma once
// The "native" baseline of a host backend that has no native library (Threads):
// each rank runs, on its own private memory and with no synchronisation, the
// plain memcpy/reduce loops that move the same bytes as the backend's
// algorithm. The ratio our/native is then the cost of sharing memory between
// ranks and of the handshakes; see docs/benchmarks.md for the exact model.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <polycoll/kernels/reduce.hpp>

#include "harness.hpp"

namespace polycoll::perf {

namespace detail {
// Rank q's slice of `count` elements when n ranks split a reduction, on 64-byte
// boundaries like the Threads backend.
inline std::pair<std::size_t, std::size_t> slice(std::size_t count, std::size_t elem, std::size_t n, std::size_t q) {
  const std::size_t unit = std::max<std::size_t>(1, 64 / elem);
  const std::size_t units = (count + unit - 1) / unit;
  auto edge = [&](std::size_t r) { return std::min(count, (units * r / n) * unit); };
  return {edge(q), edge(q + 1)};
}

template <class T>
T* at(std::uint64_t address) noexcept {
  return reinterpret_cast<T*>(static_cast<std::uintptr_t>(address));
}
}  // namespace detail

/// Runs one native call on host memory. `c.scratch` is this rank's private
/// stand-in for the peers' buffers (as large as the largest buffer).
/// - all_reduce: reduce my slice (count/n) from my buffer and n-1 slices of
///   scratch into my buffer, then memcpy the other n-1 slices from scratch;
/// - broadcast: non-root ranks memcpy count elements from scratch; the root nothing;
/// - all_gather: memcpy my block into place (out-of-place only), then n-1 blocks from scratch;
/// - reduce_scatter: reduce my block of send and n-1 blocks of scratch into recv;
/// - sendrecv: memcpy count elements from scratch into recv;
/// - reduce: reduce my slice (count/n) of send and n-1 slices of scratch into
///   that slice of recv (the root's recv in the backend: every rank reduces its
///   slice straight into it);
/// - gather: memcpy my block into the root's recv (on the root: into place,
///   nothing in place; elsewhere: into scratch, the stand-in for the root's recv);
/// - scatter: memcpy my block out of the root's send (on the root: from its own
///   send, nothing in place; elsewhere: from scratch) into recv;
/// - all_to_all: memcpy my own block from send, then n-1 blocks from scratch, into recv.
inline Status plain_native(const NativeCall& c) {
  const std::size_t n = c.world;
  const std::size_t r = c.rank;
  const std::size_t elem = size_of(c.dtype);
  std::byte* scratch = detail::at<std::byte>(c.scratch);
  switch (c.coll) {
    case Coll::broadcast:
      if (r != c.root && c.count) std::memcpy(detail::at<std::byte>(c.recv), scratch, c.count * elem);
      return {};
    case Coll::sendrecv:
      if (c.count) std::memcpy(detail::at<std::byte>(c.recv), scratch, c.count * elem);
      return {};
    case Coll::all_gather: {
      std::byte* recv = detail::at<std::byte>(c.recv);
      const std::size_t b = c.count * elem;
      if (b == 0) return {};
      if (c.send != c.recv + r * b) std::memcpy(recv + r * b, detail::at<std::byte>(c.send), b);
      for (std::size_t q = 0; q < n; ++q) {
        if (q != r) std::memcpy(recv + q * b, scratch + q * b, b);
      }
      return {};
    }
    case Coll::gather: {
      const std::size_t b = c.count * elem;
      if (b == 0) return {};
      if (r != c.root) {
        std::memcpy(scratch + r * b, detail::at<std::byte>(c.send), b);
      } else if (c.send != c.recv + r * b) {
        std::memcpy(detail::at<std::byte>(c.recv) + r * b, detail::at<std::byte>(c.send), b);
      }
      return {};
    }
    case Coll::scatter: {
      const std::size_t b = c.count * elem;
      if (b == 0) return {};
      if (r != c.root) {
        std::memcpy(detail::at<std::byte>(c.recv), scratch + r * b, b);
      } else if (c.recv != c.send + r * b) {
        std::memcpy(detail::at<std::byte>(c.recv), detail::at<std::byte>(c.send) + r * b, b);
      }
      return {};
    }
    case Coll::all_to_all: {
      std::byte* recv = detail::at<std::byte>(c.recv);
      const std::size_t b = c.count * elem;
      if (b == 0) return {};
      std::memcpy(recv + r * b, detail::at<std::byte>(c.send) + r * b, b);
      for (std::size_t q = 0; q < n; ++q) {
        if (q != r) std::memcpy(recv + q * b, scratch + q * b, b);
      }
      return {};
    }
    case Coll::all_reduce:
    case Coll::reduce_scatter:
    case Coll::reduce:
      break;
  }
  return visit_dtype(c.dtype, [&](auto d) -> Status {
    using T = typename decltype(d)::type;
    constexpr DType DV = decltype(d)::value;
    return visit_op(
        c.op,
        [&](auto o) -> Status {
          if constexpr (is_valid_v<DV, decltype(o)::value>) {
            const T* inline_src[16] = {};  // no allocation per call for the usual world sizes
            std::vector<const T*> heap(n > 16 ? n : 0);
            const T** src = n > 16 ? heap.data() : inline_src;
            const T* other = detail::at<const T>(c.scratch);
            if (c.coll == Coll::all_reduce) {
              T* buf = detail::at<T>(c.recv);
              const auto [lo, hi] = detail::slice(c.count, sizeof(T), n, r);
              src[0] = buf + lo;
              for (std::size_t q = 0, j = 1; q < n; ++q) {
                if (q != r) src[j++] = other + detail::slice(c.count, sizeof(T), n, q).first;
              }
              if (hi > lo) kernels::combine_n(d, o, buf + lo, src, n, hi - lo, n);
              for (std::size_t q = 0; q < n; ++q) {
                if (q == r) continue;
                const auto [qlo, qhi] = detail::slice(c.count, sizeof(T), n, q);
                if (qhi > qlo) std::memcpy(buf + qlo, other + qlo, (qhi - qlo) * sizeof(T));
              }
            } else if (c.coll == Coll::reduce) {
              const auto [lo, hi] = detail::slice(c.count, sizeof(T), n, r);
              src[0] = detail::at<const T>(c.send) + lo;
              for (std::size_t q = 0, j = 1; q < n; ++q) {
                if (q != r) src[j++] = other + lo;
              }
              if (hi > lo) kernels::combine_n(d, o, detail::at<T>(c.recv) + lo, src, n, hi - lo, n);
            } else {
              src[0] = detail::at<const T>(c.send) + r * c.count;
              for (std::size_t q = 0, j = 1; q < n; ++q) {
                if (q != r) src[j++] = other + q * c.count;
              }
              kernels::combine_n(d, o, detail::at<T>(c.recv), src, n, c.count, n);
            }
            return {};
          } else {
            return fail(Errc::invalid_argument, "plain_native: invalid (dtype, op)");
          }
        },
        []() -> Status { return fail(Errc::invalid_argument, "plain_native: unknown op"); });
  }, [&]() -> Status {
    return fail(Errc::invalid_argument, "plain_native: unknown dtype");
  });
}

}  // namespace polycoll::perf
