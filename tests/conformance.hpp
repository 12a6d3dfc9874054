#pragma once
// The conformance suite: written once, instantiated for every backend.
//
// A suite TU defines POLYCOLL_FIXTURE (a fixture type, see NoOpFixture in
// noop_conformance.cpp) and POLYCOLL_TAG (e.g. "[noop]") and includes this file.
// A fixture provides:
//   using Backend;                                     the backend under test
//   static std::vector<std::size_t> world_sizes();     sizes to run at
//   template <class F> static std::vector<Report> run(std::size_t world, F body);
//       runs body(Backend& comm, Report& rep) on every rank of this process
//   template <class T> using Buffer;                   Buffer(n), address(), write(Array), read()
//   static constexpr bool host_memory;                 typed-surface tests need host spans
//   static constexpr std::size_t large_count;          the "one large count"
//
// Every expectation is closed-form: computed from (world, rank, index) with
// exact values, so it holds at any world size.

#include <catch2/catch.hpp>

#include <chrono>
#include <complex>
#include <cstdint>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support.hpp"

#ifndef POLYCOLL_FIXTURE
#error "define POLYCOLL_FIXTURE before including conformance.hpp"
#endif

namespace polycoll::test::conformance {
namespace {

using Fx = POLYCOLL_FIXTURE;
using B = typename Fx::Backend;
template <class T>
using Buf = typename Fx::template Buffer<T>;

constexpr std::size_t counts[] = {0, 1, 7, 4097};

template <class F>
void for_each_dtype(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (f(dtype_tag<all_dtypes[I]>{}), ...);
  }(std::make_index_sequence<dtype_count>{});
}

template <class F>
void for_each_op(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (f(op_tag<all_reduce_ops[I]>{}), ...);
  }(std::make_index_sequence<reduce_op_count>{});
}

// The loops every test case runs inside each_world: `f.template
// operator()<D, T>()` (f written `[&]<DType D, class T>() {...}`) for each
// dtype the backend supports, and `f<D, Op, T>` for each (dtype, op) pair it
// supports (each_pair) or that is valid at all (each_valid_pair: the backend
// must reject the ones it does not support).
template <class F>
void each_dtype(F&& f) {
  for_each_dtype([&]<DType D>(dtype_tag<D>) {
    if constexpr (supports_dtype_v<B, D>) f.template operator()<D, typename dtype_tag<D>::type>();
  });
}

template <class F>
void each_valid_pair(F&& f) {
  for_each_dtype([&]<DType D>(dtype_tag<D>) {
    for_each_op([&]<ReduceOp Op>(op_tag<Op>) {
      if constexpr (is_valid_v<D, Op>) f.template operator()<D, Op, typename dtype_tag<D>::type>();
    });
  });
}

template <class F>
void each_pair(F&& f) {
  each_valid_pair([&]<DType D, ReduceOp Op, class T>() {
    if constexpr (supports_reduction_v<B, D, Op>) f.template operator()<D, Op, T>();
  });
}

std::size_t mix(std::size_t r, std::size_t i) { return i * 131 + r * 17; }

// Element i of rank r's contribution to a reduction with `op` in a world of w.
template <class T>
T input(ReduceOp op, std::size_t w, std::size_t r, std::size_t i) {
  constexpr std::int64_t m = exact_range<T>();
  auto real = [&](std::size_t j) -> double {
    if constexpr (std::is_same_v<T, bool>) {
      return mix(r, j) % 3 == 0 ? 1.0 : 0.0;
    } else {
      switch (op) {
        case ReduceOp::Prod:
          return r == j % w ? 2.0 : 1.0;
        case ReduceOp::Min:
        case ReduceOp::Max: {
          const std::int64_t q = std::min<std::int64_t>(m, 100);
          std::int64_t v = static_cast<std::int64_t>(mix(r, j) % static_cast<std::size_t>(q + 1));
          if constexpr (std::is_signed_v<T> || is_narrow_float_v<T> || std::is_floating_point_v<T>) v -= q / 2;
          return static_cast<double>(v);
        }
        default: {
          const std::size_t q = static_cast<std::size_t>(m) / w + 1;  // w * (q - 1) <= m: every partial sum exact
          return static_cast<double>(mix(r, j) % q);
        }
      }
    }
  };
  if constexpr (is_complex_v<T>) {
    if (op == ReduceOp::Prod) return r == i % w ? make<T>(0, 1) : make<T>(1, 0);
    return make<T>(real(i), real(i + 1));
  } else {
    return make<T>(real(i));
  }
}

template <class T>
std::complex<double> fold(ReduceOp op, std::complex<double> a, std::complex<double> b) {
  if constexpr (std::is_same_v<T, bool>) {
    const bool x = a.real() != 0, y = b.real() != 0;
    return (op == ReduceOp::Sum || op == ReduceOp::Max) ? (x || y) : (x && y);
  } else {
    switch (op) {
      case ReduceOp::Prod: return a * b;
      case ReduceOp::Min: return std::min(a.real(), b.real());
      case ReduceOp::Max: return std::max(a.real(), b.real());
      default: return a + b;
    }
  }
}

// The closed-form result of reducing element i over every rank.
template <class T>
std::complex<double> expected_value(ReduceOp op, std::size_t w, std::size_t i) {
  std::complex<double> acc = value_of(input<T>(op, w, 0, i));
  for (std::size_t r = 1; r < w; ++r) acc = fold<T>(op, acc, value_of(input<T>(op, w, r, i)));
  if (op == ReduceOp::Avg) acc /= static_cast<double>(w);
  return acc;
}

// A fixture whose backend rounds differently (NCCL reduces narrow floats in
// their own precision, step by step) states its own bound.
template <class F, class T>
concept states_avg_tolerance = requires { F::template avg_tolerance<T>(); };
template <class F, class T>
double fixture_avg_tolerance() {
  return F::template avg_tolerance<T>();
}

template <class T>
double avg_tolerance() {
  if constexpr (states_avg_tolerance<Fx, T>) return fixture_avg_tolerance<Fx, T>();
  else if constexpr (std::is_same_v<T, f8e5m2>) return 0.25;
  else if constexpr (std::is_same_v<T, f8e4m3>) return 0.125;
  else if constexpr (std::is_same_v<T, bf16>) return 8e-3;
  else if constexpr (std::is_same_v<T, f16>) return 1e-3;
  else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, std::complex<float>>) return 1e-6;
  else return 1e-12;
}

template <class T>
void check_reduced(Report& rep, const Array<T>& got, ReduceOp op, std::size_t w, std::size_t first_index,
                   const std::string& what) {
  ++rep.checks;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto want = expected_value<T>(op, w, first_index + i);
    bool ok;
    if (op == ReduceOp::Avg) {
      const auto g = value_of(got[i]);
      ok = std::abs(g - want) <= avg_tolerance<T>() * std::max(1.0, std::abs(want));
    } else {
      ok = same(got[i], make<T>(want.real(), want.imag()));
    }
    if (!ok) {
      rep.expect(false, what + ": element " + std::to_string(i) + " is " + show(got[i]) + ", expected " +
                            show(make<T>(want.real(), want.imag())));
      return;
    }
  }
}

// rank r's element i for the data-movement collectives; exact in every type.
template <class T>
T movement_value(std::size_t r, std::size_t i) {
  constexpr std::int64_t m = exact_range<T>();
  const double v = static_cast<double>((i * 7 + r * 3 + 1) % static_cast<std::size_t>(m + 1));
  if constexpr (is_complex_v<T>) return make<T>(v, -v);
  else return make<T>(v);
}

template <class T>
Array<T> movement_block(std::size_t r, std::size_t n) {
  Array<T> a(n);
  for (std::size_t i = 0; i < n; ++i) a[i] = movement_value<T>(r, i);
  return a;
}

std::string ctx(const char* call, DType d, std::size_t count, std::string extra = {}) {
  return std::string(call) + "(dtype=" + std::string(name(d)) + ", count=" + std::to_string(count) + extra + ")";
}

void require_all(const std::vector<Report>& reports) {
  REQUIRE_FALSE(reports.empty());
  for (const auto& rep : reports) {
    INFO("rank " << rep.rank << " of " << rep.world << " [" << B::backend_name << "], " << rep.failures.size()
                 << " failure(s) in " << rep.checks << " checks");
    for (const auto& f : rep.failures) UNSCOPED_INFO(f);
    CHECK(rep.failures.empty());
  }
}

template <class Body>
void each_world(Body body) {
  for (std::size_t w : Fx::world_sizes()) {
    INFO("world " << w);
    require_all(Fx::run(w, body));
  }
}

// A bad-input case: `s` failed with `code`, and its message holds `needle`
// and "of <w> [<backend>]" (rank/world/backend), as every Error must.
template <class R>
void expect_error(Report& rep, std::size_t w, const R& s, Errc code, const std::string& needle,
                  const std::string& what) {
  rep.expect(!s, what + " must fail");
  if (s) return;
  rep.expect(s.error().code == code, what + ": wrong code " + std::string(to_string(s.error().code)));
  const std::string& m = s.error().message;
  rep.expect(m.find(needle) != std::string::npos, what + ": message lacks '" + needle + "': " + m);
  rep.expect(m.find("of " + std::to_string(w) + " [" + std::string(B::backend_name) + "]") != std::string::npos,
             what + ": message lacks rank/world/backend: " + m);
}

}  // namespace

TEST_CASE("all_reduce: every dtype, every valid op, every count", "[conformance][all_reduce]" POLYCOLL_TAG) {
  each_world([](B& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    each_valid_pair([&]<DType D, ReduceOp Op, class T>() {
      std::vector<std::size_t> ns(std::begin(counts), std::end(counts));
      if (D == DType::F32 && Op == ReduceOp::Sum) ns.push_back(Fx::large_count);
      for (std::size_t n : ns) {
        Array<T> host(n);
        for (std::size_t i = 0; i < n; ++i) host[i] = input<T>(Op, w, r, i);
        Buf<T> buf(n);
        buf.write(host);
        const auto what = ctx("all_reduce", D, n, ", op=" + std::string(name(Op)));
        const Status s = comm.all_reduce(buf.address(), n, D, Op);
        if constexpr (supports_reduction_v<B, D, Op>) {
          rep.expect_ok(s, what);
          rep.expect_ok(comm.sync(), what + " sync");
          check_reduced(rep, buf.read(), Op, w, 0, what);
        } else {
          rep.expect(!s && s.error().code == Errc::unsupported, what + " must be unsupported");
        }
      }
    });
  });
}

TEST_CASE("reduce_scatter: separate and in-place buffers", "[conformance][reduce_scatter]" POLYCOLL_TAG) {
  each_world([](B& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    each_pair([&]<DType D, ReduceOp Op, class T>() {
      for (std::size_t n : counts) {
        for (bool in_place : {false, true}) {
          Array<T> host(n * w);
          for (std::size_t i = 0; i < n * w; ++i) host[i] = input<T>(Op, w, r, i);
          Buf<T> send(n * w);
          Buf<T> recv(n);
          send.write(host);
          const std::uint64_t out = in_place ? send.address() + r * n * sizeof(T) : recv.address();
          const auto what = ctx("reduce_scatter", D, n,
                                ", op=" + std::string(name(Op)) + (in_place ? ", in place" : ""));
          rep.expect_ok(comm.reduce_scatter(send.address(), out, n, D, Op), what);
          rep.expect_ok(comm.sync(), what + " sync");
          Array<T> got = in_place ? send.read() : recv.read();
          if (in_place) {
            Array<T> block(n);
            for (std::size_t i = 0; i < n; ++i) block[i] = got[r * n + i];
            got = block;
          }
          check_reduced(rep, got, Op, w, r * n, what);
        }
      }
    });
  });
}

// The in-place form writes the rank's own block of send and nothing else:
// every other block still holds this rank's input afterwards. (Mpi's
// MPI_IN_PLACE form left the result in block 0, overwriting it on every rank
// but 0.) Each op and a few dtypes, counts below and above 128 KiB.
TEST_CASE("reduce_scatter in place changes only the rank's own block", "[conformance][reduce_scatter]" POLYCOLL_TAG) {
  each_world([](B& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    auto run = [&]<DType D, ReduceOp Op>(dtype_tag<D>, op_tag<Op>) {
      using T = typename dtype_tag<D>::type;
      if constexpr (supports_reduction_v<B, D, Op>) {
        for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{4097}, std::size_t{40000}}) {
          Array<T> host(n * w);
          for (std::size_t i = 0; i < n * w; ++i) host[i] = input<T>(Op, w, r, i);
          Buf<T> send(n * w);
          send.write(host);
          const auto what = ctx("reduce_scatter", D, n, ", op=" + std::string(name(Op)) + ", in place");
          rep.expect_ok(comm.reduce_scatter(send.address(), send.address() + r * n * sizeof(T), n, D, Op), what);
          rep.expect_ok(comm.sync(), what + " sync");
          const Array<T> got = send.read();
          Array<T> own(n), others((w - 1) * n), others_want((w - 1) * n);
          for (std::size_t b = 0, k = 0; b < w; ++b) {
            for (std::size_t i = 0; i < n; ++i) {
              if (b == r) {
                own[i] = got[b * n + i];
              } else {
                others[k] = got[b * n + i];
                others_want[k++] = host[b * n + i];
              }
            }
          }
          check_reduced(rep, own, Op, w, r * n, what + ", own block");
          rep.expect_equal(others, others_want, what + ", the other ranks' blocks (must be untouched)");
        }
      }
    };
    run(dtype_tag<DType::F32>{}, op_tag<ReduceOp::Sum>{});
    run(dtype_tag<DType::F64>{}, op_tag<ReduceOp::Avg>{});
    run(dtype_tag<DType::I32>{}, op_tag<ReduceOp::Max>{});
    run(dtype_tag<DType::U8>{}, op_tag<ReduceOp::Min>{});
    run(dtype_tag<DType::BF16>{}, op_tag<ReduceOp::Sum>{});
    run(dtype_tag<DType::C64>{}, op_tag<ReduceOp::Prod>{});
  });
}

TEST_CASE("broadcast: every dtype from every root", "[conformance][broadcast]" POLYCOLL_TAG) {
  each_world([](B& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    each_dtype([&]<DType D, class T>() {
      for (std::size_t n : counts) {
        for (std::size_t root = 0; root < w; ++root) {
          Buf<T> buf(n);
          buf.write(movement_block<T>(r, n));
          const auto what = ctx("broadcast", D, n, ", root=" + std::to_string(root));
          rep.expect_ok(comm.broadcast(buf.address(), n, D, root), what);
          rep.expect_ok(comm.sync(), what + " sync");
          rep.expect_equal(buf.read(), movement_block<T>(root, n), what);
        }
      }
    });
  });
}

TEST_CASE("all_gather: separate and in-place buffers", "[conformance][all_gather]" POLYCOLL_TAG) {
  each_world([](B& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    each_dtype([&]<DType D, class T>() {
      for (std::size_t n : counts) {
        Array<T> want(n * w);
        for (std::size_t q = 0; q < w; ++q)
          for (std::size_t i = 0; i < n; ++i) want[q * n + i] = movement_value<T>(q, i);
        for (bool in_place : {false, true}) {
          Buf<T> send(n);
          Buf<T> recv(n * w);
          send.write(movement_block<T>(r, n));
          std::uint64_t in = send.address();
          if (in_place) {
            Array<T> seeded(n * w);
            for (std::size_t i = 0; i < n; ++i) seeded[r * n + i] = movement_value<T>(r, i);
            recv.write(seeded);
            in = recv.address() + r * n * sizeof(T);
          }
          const auto what = ctx("all_gather", D, n, in_place ? ", in place" : "");
          rep.expect_ok(comm.all_gather(in, recv.address(), n, D), what);
          rep.expect_ok(comm.sync(), what + " sync");
          rep.expect_equal(recv.read(), want, what);
        }
      }
    });
  });
}

TEST_CASE("send/recv: ring, exchange pattern at 1 MiB, out-of-order tags", "[conformance][p2p]" POLYCOLL_TAG) {
  each_world([](B& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    const std::size_t next = (r + 1) % w, prev = (r + w - 1) % w;
    each_dtype([&]<DType D, class T>() {
      for (std::size_t n : counts) {
        Buf<T> out(n), in(n);
        out.write(movement_block<T>(r, n));
        const auto what = ctx("ring send/recv", D, n);
        rep.expect_ok(comm.send(out.address(), n, D, next, 7), what + " send");
        rep.expect_ok(comm.recv(in.address(), n, D, prev, 7), what + " recv");
        rep.expect_ok(comm.sync(), what + " sync");
        rep.expect_equal(in.read(), movement_block<T>(prev, n), what);
      }
    });
    // Exchange: both partners send first, then both receive, then sync. Must
    // not deadlock at a size far above any eager threshold.
    {
      const std::size_t n = (1u << 20) / sizeof(float);
      const std::size_t partner = (r % 2 == 0) ? std::min(r + 1, w - 1) : r - 1;
      Buf<float> out(n), in(n);
      out.write(movement_block<float>(r, n));
      rep.expect_ok(comm.send(out.address(), n, DType::F32, partner, 1), "exchange send");
      rep.expect_ok(comm.recv(in.address(), n, DType::F32, partner, 1), "exchange recv");
      rep.expect_ok(comm.sync(), "exchange sync");
      rep.expect_equal(in.read(), movement_block<float>(partner, n), "exchange 1 MiB");
    }
    // Tags: three messages sent with tags 1, 2, 3 are received in order 3, 1, 2.
    if constexpr (Fx::matches_tags) {
      const std::uint32_t tags[] = {3, 1, 2};
      std::vector<Buf<std::int32_t>> outs, ins;
      for (std::uint32_t t = 1; t <= 3; ++t) {
        outs.emplace_back(5);
        Array<std::int32_t> a(5);
        for (std::size_t i = 0; i < 5; ++i) a[i] = static_cast<std::int32_t>(100 * t + 10 * r + i);
        outs.back().write(a);
        rep.expect_ok(comm.send(outs.back().address(), 5, DType::I32, next, t), "tagged send");
      }
      for (std::uint32_t t : tags) {
        ins.emplace_back(5);
        rep.expect_ok(comm.recv(ins.back().address(), 5, DType::I32, prev, t), "tagged recv");
      }
      rep.expect_ok(comm.sync(), "tagged sync");
      for (std::size_t k = 0; k < 3; ++k) {
        Array<std::int32_t> want(5);
        for (std::size_t i = 0; i < 5; ++i) want[i] = static_cast<std::int32_t>(100 * tags[k] + 10 * prev + i);
        rep.expect_equal(ins[k].read(), want, "recv with tag " + std::to_string(tags[k]));
      }
    }
  });
}

// A send completes at sync() (like MPI_Isend); a send of at most
// detail::eager_bytes that finds no posted receive is copied when posted, on
// every backend. So the line-by-line port of
//   for (...) { length = f(i); MPI_Send(&length, ...); }
// delivers 100 101 102 everywhere (it read 102 102 102 on Threads before the
// copy), and the consistency check reports the reuse as Errc::mismatch.
TEST_CASE("send: a small send buffer reused before sync() (eager copy, or the check's mismatch)",
          "[conformance][p2p]" POLYCOLL_TAG) {
  if constexpr (Fx::host_memory) {
    each_world([](B& comm, Report& rep) {
      const std::size_t w = comm.world_size(), r = comm.rank();
      const std::size_t next = (r + 1) % w, prev = (r + w - 1) % w;
      const bool check = detail::check_from_environment();
      std::int32_t length = 0;
      std::int32_t got[3] = {-1, -1, -1};
      for (std::int32_t i = 0; i < 3; ++i) {
        length = 100 + i + 10 * static_cast<std::int32_t>(r);
        rep.expect_ok(comm.send(detail::to_address(&length), 1, DType::I32, next, 5), "send length");
      }
      // The receives come after the sends were posted: at world 1 (send to
      // self) the sends are always queued, not delivered into place.
      for (std::size_t i = 0; i < 3; ++i) {
        rep.expect_ok(comm.recv(detail::to_address(&got[i]), 1, DType::I32, prev, 5), "recv length");
      }
      const Status s = comm.sync();
      if (check) {
        rep.expect(!s && s.error().code == Errc::mismatch, "with POLYCOLL_CHECK=1 the reuse is Errc::mismatch");
        if (!s) {
          const std::string& m = s.error().message;
          rep.expect(m.find("send(count=1, dtype=i32, dest=" + std::to_string(next) + ", tag=5)") != std::string::npos &&
                         m.find("send buffer changed") != std::string::npos,
                     "the mismatch names the send: " + m);
        }
      } else {
        rep.expect_ok(s, "sync");
        const std::int32_t base = 10 * static_cast<std::int32_t>(prev);
        rep.expect(got[0] == 100 + base && got[1] == 101 + base && got[2] == 102 + base,
                   "received " + std::to_string(got[0]) + " " + std::to_string(got[1]) + " " +
                       std::to_string(got[2]) + ", expected " + std::to_string(100 + base) + " " +
                       std::to_string(101 + base) + " " + std::to_string(102 + base));
      }
    });
  }
}

namespace {
// Polls a non-blocking probe until it finds a message or fails (bounded).
template <class P>
auto probe_until_found(P&& probe) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    auto res = probe();
    if (!res || res->has_value() || std::chrono::steady_clock::now() > until) return res;
    std::this_thread::yield();
  }
}
}  // namespace

TEST_CASE("probe and any_source / any_tag receives", "[conformance][p2p][probe]" POLYCOLL_TAG) {
  // Generic (auto&), so that the discarded branch for a backend without
  // probe is not instantiated (the typed probe<T> static_asserts there).
  each_world([](auto& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    const std::size_t next = (r + 1) % w, prev = (r + w - 1) % w;
    Buf<std::int32_t> buf(4);
    if constexpr (!supports_probe_v<B>) {
      auto p = comm.probe(0, 1, DType::F32);
      rep.expect(!p && p.error().code == Errc::unsupported, "probe is Errc::unsupported without supports_probe");
      const Status a = comm.recv(buf.address(), 4, DType::I32, any_source, 1);
      rep.expect(!a && a.error().code == Errc::unsupported, "recv from any_source is Errc::unsupported");
      const Status t = comm.recv(buf.address(), 4, DType::I32, 0, any_tag);
      rep.expect(!t && t.error().code == Errc::unsupported, "recv with any_tag is Errc::unsupported");
    } else {
      // Nothing is ever sent with tag 99: probe does not block, it says so.
      auto none = comm.probe(any_source, 99, DType::I32);
      rep.expect(none.has_value() && !none->has_value(), "probe with nothing pending is nullopt");

      // probe, then recv from the probed source and tag with the probed count.
      {
        Buf<std::int32_t> out(3 + r);
        Array<std::int32_t> a(3 + r);
        for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::int32_t>(1000 * r + i);
        out.write(a);
        rep.expect_ok(comm.send(out.address(), 3 + r, DType::I32, next, 17), "send for probe");
        auto found = probe_until_found([&] { return comm.probe(any_source, any_tag, DType::I32); });
        rep.expect(found.has_value() && found->has_value(), "probe(any_source, any_tag) finds the message");
        if (found && *found) {
          const MessageInfo info = **found;
          rep.expect(info.source == prev && info.tag == 17 && info.count == 3 + prev,
                     "probe: source " + std::to_string(info.source) + " tag " + std::to_string(info.tag) +
                         " count " + std::to_string(info.count));
          auto again = comm.probe(prev, 17, DType::U8);
          rep.expect(again && *again && (*again)->count == 4 * (3 + prev), "probe in bytes (U8) counts bytes");
          Buf<std::int32_t> in(info.count);
          rep.expect_ok(comm.recv(in.address(), info.count, DType::I32, info.source, info.tag), "recv probed");
          rep.expect_ok(comm.sync(), "sync after probe");
          Array<std::int32_t> want(info.count);
          for (std::size_t i = 0; i < want.size(); ++i) want[i] = static_cast<std::int32_t>(1000 * prev + i);
          rep.expect_equal(in.read(), want, "recv of the probed message");
        } else {
          rep.expect_ok(comm.sync(), "sync");
        }
        if constexpr (Fx::host_memory) {
          std::int32_t one = 0;
          rep.expect_ok(comm.send(detail::to_address(&one), 1, DType::I32, next, 18), "typed probe send");
          auto typed = probe_until_found([&] { return comm.template probe<std::int32_t>(prev, 18); });
          rep.expect(typed && *typed && (*typed)->count == 1 && (*typed)->source == prev, "typed probe<T>");
          std::int32_t into = -1;
          rep.expect_ok(comm.recv(std::span<std::int32_t>(&into, 1), any_source, 18), "typed recv any_source");
          rep.expect_ok(comm.sync(), "typed sync");
        }
        // Before the fan-in: a rank that ran ahead would otherwise send its
        // fan-in messages while rank 0 still probes (any_source, any_tag)
        // above, which then finds and takes one of them (seen under TSan: a
        // hang, the fan-in one message short).
        rep.expect_ok(comm.barrier(), "barrier after probe");
      }

      // Fan-in with wildcards: every rank sends two messages to rank 0 with
      // its own tag; rank 0 receives 2w from (any_source, any_tag). Messages
      // from one sender arrive in the order it sent them (non-overtaking).
      {
        Buf<std::int32_t> first(1), second(1);
        Array<std::int32_t> v(1);
        v[0] = static_cast<std::int32_t>(10 * r);
        first.write(v);
        v[0] = static_cast<std::int32_t>(10 * r + 1);
        second.write(v);
        rep.expect_ok(comm.send(first.address(), 1, DType::I32, 0, 30 + static_cast<std::uint32_t>(r)), "fan-in 1");
        rep.expect_ok(comm.send(second.address(), 1, DType::I32, 0, 30 + static_cast<std::uint32_t>(r)), "fan-in 2");
        Buf<std::int32_t> in(2 * w);
        if (r == 0) {
          for (std::size_t k = 0; k < 2 * w; ++k) {
            rep.expect_ok(comm.recv(in.address() + k * sizeof(std::int32_t), 1, DType::I32, any_source, any_tag),
                          "fan-in recv any");
          }
        }
        rep.expect_ok(comm.sync(), "fan-in sync");
        if (r == 0) {
          const Array<std::int32_t> got = in.read();
          for (std::size_t q = 0; q < w; ++q) {
            std::size_t at1 = got.size(), at2 = got.size();
            for (std::size_t k = 0; k < got.size(); ++k) {
              if (got[k] == static_cast<std::int32_t>(10 * q)) at1 = k;
              if (got[k] == static_cast<std::int32_t>(10 * q + 1)) at2 = k;
            }
            rep.expect(at1 < got.size() && at2 < got.size() && at1 < at2,
                       "rank " + std::to_string(q) + "'s two messages arrived, in order");
          }
        }
        rep.expect_ok(comm.barrier(), "fan-in barrier");
      }

      // A specific receive posted before a wildcard one keeps its message:
      // rank 0 posts recv(prev, 51) then recv(any_source, any_tag); prev
      // sends tag 52, then tag 51.
      {
        Buf<std::int32_t> x(1), y(1), a(1), b(1);
        Array<std::int32_t> v(1);
        if (r == 0) {
          rep.expect_ok(comm.recv(x.address(), 1, DType::I32, prev, 51), "specific recv");
          rep.expect_ok(comm.recv(y.address(), 1, DType::I32, any_source, any_tag), "wildcard recv");
        }
        if (r == (w - 1)) {
          v[0] = 52;
          a.write(v);
          v[0] = 51;
          b.write(v);
          rep.expect_ok(comm.send(a.address(), 1, DType::I32, 0, 52), "send 52");
          rep.expect_ok(comm.send(b.address(), 1, DType::I32, 0, 51), "send 51");
        }
        rep.expect_ok(comm.sync(), "specific/wildcard sync");
        if (r == 0) {
          rep.expect(x.read()[0] == 51 && y.read()[0] == 52,
                     "recv(prev, 51) got " + std::to_string(x.read()[0]) + ", the wildcard got " +
                         std::to_string(y.read()[0]));
        }
        rep.expect_ok(comm.barrier(), "specific/wildcard barrier");
      }

      // A message whose bytes are not a whole number of the probed dtype.
      {
        Buf<std::uint8_t> three(3);
        rep.expect_ok(comm.send(three.address(), 3, DType::U8, next, 40), "send 3 bytes");
        auto bad = probe_until_found([&] { return comm.probe(prev, 40, DType::F32); });
        rep.expect(!bad && bad.error().code == Errc::mismatch &&
                       bad.error().message.find("not a whole number of f32") != std::string::npos,
                   "probe of 3 bytes as f32 is Errc::mismatch" + (bad ? std::string() : ": " + bad.error().message));
        Buf<std::uint8_t> in(3);
        rep.expect_ok(comm.recv(in.address(), 3, DType::U8, prev, 40), "recv 3 bytes");
        rep.expect_ok(comm.sync(), "sync 3 bytes");
      }
    }

    // Bad input: the wildcards are not a send's, probe's src is a rank.
    auto expect_error = [&](const auto& s, Errc code, const std::string& needle, const std::string& what) {
      conformance::expect_error(rep, w, s, code, needle, what);
    };
    expect_error(comm.send(buf.address(), 4, DType::I32, any_source, 1), Errc::invalid_argument,
                 "dest is any_source", "send to any_source");
    expect_error(comm.send(buf.address(), 4, DType::I32, next, any_tag), Errc::invalid_argument,
                 "tag is any_tag", "send with any_tag");
    expect_error(comm.send_recv(buf.address(), 2, next, buf.address() + 8, 2, any_source, DType::I32, 1),
                 Errc::invalid_argument, "src is any_source", "send_recv from any_source");
    if constexpr (supports_probe_v<B>) {
      expect_error(comm.probe(w, 1, DType::F32), Errc::invalid_argument, "probe(dtype=f32, src=" + std::to_string(w),
                   "probe src out of range");
      expect_error(comm.probe(0, 1, static_cast<DType>(77)), Errc::invalid_argument, "unknown DType value",
                   "probe unknown dtype");
    }
    rep.expect_ok(comm.barrier(), "barrier after bad input");
  });
}

TEST_CASE("split: parity colors, reversed keys, no_color, nested", "[conformance][split]" POLYCOLL_TAG) {
  each_world([](B& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    // color = parity, key = reverse rank: sub-rank counts down.
    auto sub = comm.split(static_cast<std::uint32_t>(r % 2), static_cast<std::uint32_t>(w - r));
    rep.expect(sub.has_value(), "split(parity) returned an error");
    if (!sub) return;
    if (!sub->has_value()) {
      rep.expect(Fx::split_may_be_unsupported, "split returned nullopt for a real color");
      return;
    }
    B& s = **sub;
    const std::size_t same_parity = (w - r % 2 + 1) / 2;           // ranks q < w with q % 2 == r % 2
    const std::size_t higher = (w - 1 - r) / 2;                     // ranks q > r with the same parity
    rep.expect(s.world_size() == same_parity, "sub world size " + std::to_string(s.world_size()));
    rep.expect(s.rank() == higher, "sub rank " + std::to_string(s.rank()) + ", expected " + std::to_string(higher));
    Buf<std::int64_t> one(1);
    Array<std::int64_t> v(1);
    v[0] = static_cast<std::int64_t>(r);
    one.write(v);
    rep.expect_ok(s.all_reduce(one.address(), 1, DType::I64, ReduceOp::Sum), "sub all_reduce");
    rep.expect_ok(s.sync(), "sub sync");
    std::int64_t want = 0;
    for (std::size_t q = r % 2; q < w; q += 2) want += static_cast<std::int64_t>(q);
    rep.expect(one.read()[0] == want, "sub all_reduce of ranks gave " + std::to_string(one.read()[0]));

    // Nested: split the sub-communicator again into halves of itself.
    auto nested = s.split(static_cast<std::uint32_t>(s.rank() < s.world_size() / 2 ? 0 : 1),
                          static_cast<std::uint32_t>(s.rank()));
    rep.expect(nested.has_value() && nested->has_value(), "nested split");
    if (nested && nested->has_value()) {
      const std::size_t lo = s.world_size() / 2;
      const std::size_t want_size = s.rank() < lo ? lo : s.world_size() - lo;
      rep.expect((*nested)->world_size() == want_size, "nested size");
      rep.expect_ok((*nested)->barrier(), "nested barrier");
    }

    // no_color: rank 0 opts out and gets nullopt; the others form one communicator.
    auto part = comm.split(r == 0 ? no_color : 5u, 0);
    rep.expect(part.has_value(), "split(no_color) returned an error");
    if (part) {
      if (r == 0) rep.expect(!part->has_value(), "no_color must give nullopt");
      else if (part->has_value()) rep.expect((*part)->world_size() == w - 1, "split without rank 0: size");
    }
    rep.expect_ok(comm.barrier(), "barrier after split");
  });
}

TEST_CASE("typed surface: spans, op tags, run-time ops", "[conformance][typed]" POLYCOLL_TAG) {
  if constexpr (Fx::host_memory) {
    each_world([](B& comm, Report& rep) {
      const std::size_t w = comm.world_size(), r = comm.rank();
      std::vector<float> v(33, static_cast<float>(r + 1));
      rep.expect_ok(comm.all_reduce(std::span<float>(v), polycoll::sum), "typed all_reduce sum");
      rep.expect_ok(comm.sync(), "sync");
      rep.expect(v[32] == static_cast<float>(w * (w + 1) / 2), "typed sum value");

      std::vector<std::int32_t> m(5, static_cast<std::int32_t>(r));
      rep.expect_ok(comm.all_reduce(m, ReduceOp::Max), "typed all_reduce run-time max");
      rep.expect_ok(comm.sync(), "sync");
      rep.expect(m[4] == static_cast<std::int32_t>(w - 1), "typed max value");

      std::vector<std::int32_t> bad(3);
      const Status inv = comm.all_reduce(bad, static_cast<ReduceOp>(9));
      rep.expect(!inv && inv.error().code == Errc::invalid_argument, "unknown run-time op");

      std::vector<double> bc(4, r == 0 ? 2.5 : 0.0);
      rep.expect_ok(comm.broadcast(bc, 0), "typed broadcast");
      std::vector<std::uint16_t> mine(3, static_cast<std::uint16_t>(r)), all(3 * w);
      rep.expect_ok(comm.all_gather(std::span<const std::uint16_t>(mine), std::span<std::uint16_t>(all)),
                    "typed all_gather");
      std::vector<std::complex<double>> rs_in(2 * w, {1.0, 2.0}), rs_out(2);
      rep.expect_ok(comm.reduce_scatter(rs_in, rs_out, polycoll::sum), "typed reduce_scatter");
      rep.expect_ok(comm.sync(), "sync");
      rep.expect(bc[3] == 2.5, "typed broadcast value");
      rep.expect(all[3 * (w - 1)] == static_cast<std::uint16_t>(w - 1), "typed all_gather value");
      rep.expect(rs_out[1] == std::complex<double>(static_cast<double>(w), 2.0 * static_cast<double>(w)),
                 "typed reduce_scatter value");

      std::vector<std::uint16_t> too_small(3 * w - 1);
      const Status sz = comm.all_gather(mine, too_small);
      rep.expect(!sz && sz.error().code == Errc::invalid_argument, "all_gather span size mismatch");

      std::array<f16, 4> out{}, in{};
      out.fill(f16(static_cast<float>(r)));
      rep.expect_ok(comm.send(out, (r + 1) % w, 9), "typed send");
      rep.expect_ok(comm.recv(in, (r + w - 1) % w, 9), "typed recv");
      rep.expect_ok(comm.sync(), "sync");
      rep.expect(static_cast<float>(in[0]) == static_cast<float>((r + w - 1) % w), "typed recv value");
    });
  }
}

TEST_CASE("bad input is an Error naming call, arguments, rank and backend", "[conformance][errors]" POLYCOLL_TAG) {
  each_world([](B& comm, Report& rep) {
    const std::size_t w = comm.world_size();
    Buf<float> buf(4);
    auto expect_error = [&](const auto& s, Errc code, const std::string& needle, const std::string& what) {
      conformance::expect_error(rep, w, s, code, needle, what);
    };
    expect_error(comm.all_reduce(0, 4, DType::F32, ReduceOp::Sum), Errc::invalid_argument,
                 "all_reduce(count=4, dtype=f32, op=sum)", "null buffer");
    expect_error(comm.broadcast(buf.address(), 4, DType::F32, w), Errc::invalid_argument,
                 "root " + std::to_string(w) + " out of range", "root out of range");
    expect_error(comm.send(buf.address(), 4, DType::F32, w + 3, 1), Errc::invalid_argument, "dest", "dest out of range");
    expect_error(comm.recv(buf.address(), 4, DType::F32, w, 1), Errc::invalid_argument, "src", "src out of range");
    expect_error(comm.all_reduce(buf.address(), 4, DType::C64, ReduceOp::Min), Errc::invalid_argument,
                 "op=min", "min on complex");
    expect_error(comm.all_reduce(buf.address(), 4, DType::I32, ReduceOp::Avg), Errc::invalid_argument, "avg",
                 "avg on integers");
    expect_error(comm.all_reduce(buf.address(), 4, static_cast<DType>(77), ReduceOp::Sum), Errc::invalid_argument,
                 "unknown DType value", "unknown dtype");
    expect_error(comm.all_reduce(buf.address(), 4, DType::F32, static_cast<ReduceOp>(42)), Errc::invalid_argument,
                 "unknown ReduceOp value", "unknown op");
    expect_error(comm.all_gather(buf.address(), buf.address(), SIZE_MAX / 2, DType::F64), Errc::invalid_argument,
                 "overflows", "count*world overflow");
    expect_error(comm.reduce_scatter(buf.address(), buf.address(), SIZE_MAX / 2, DType::F32, ReduceOp::Sum),
                 Errc::invalid_argument, "overflows", "reduce_scatter overflow");
    rep.expect_ok(comm.barrier(), "barrier after bad input");
  });
}

TEST_CASE("aliasing: exact in-place forms only; any partial overlap is invalid_argument naming the call",
          "[conformance][errors][overlap]" POLYCOLL_TAG) {
  each_world([](B& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    const std::string where = "of " + std::to_string(w) + " [" + std::string(B::backend_name) + "]";
    // `call` is the described call the message must start with.
    auto expect_overlap = [&](const Status& s, const std::string& call, const std::string& what) {
      rep.expect(!s, what + " must fail");
      if (s) return;
      const std::string& m = s.error().message;
      rep.expect(s.error().code == Errc::invalid_argument, what + ": wrong code " + std::string(to_string(s.error().code)));
      rep.expect(m.rfind(call, 0) == 0, what + ": message does not start with '" + call + "': " + m);
      rep.expect(m.find("overlap") != std::string::npos, what + ": message lacks 'overlap': " + m);
      rep.expect(m.find(where) != std::string::npos, what + ": message lacks rank/world/backend: " + m);
    };
    // Every rank makes each failing call, so nobody is left in a collective;
    // the root-only rules are exercised on the root alone (the others do not call).
    // 4097 f32 per rank is above Threads' 16 KiB latency path at every world size,
    // 7 below it.
    for (std::size_t n : {std::size_t{7}, std::size_t{4097}}) {
      const std::size_t e = sizeof(float);
      Buf<float> big(n * w + n);
      const std::uint64_t a = big.address();
      const std::string cnt = "(count=" + std::to_string(n) + ", dtype=f32";
      const std::string ag = "all_gather" + cnt + ")", rs = "reduce_scatter" + cnt + ", op=sum)";
      // all_gather: send may be exactly this rank's block of recv, nothing else.
      expect_overlap(comm.all_gather(a + e, a, n, DType::F32), ag, "all_gather send one element into recv");
      expect_overlap(comm.all_gather(a + (n * w - 1) * e, a, n, DType::F32), ag,
                     "all_gather send over the end of recv");
      expect_overlap(comm.all_gather(a, a + e, n, DType::F32), ag, "all_gather recv one element into send");
      if (w > 1) {
        expect_overlap(comm.all_gather(a + ((r + 1) % w) * n * e, a, n, DType::F32), ag,
                       "all_gather send = another rank's block of recv");
      }
      // reduce_scatter: recv may be exactly this rank's block of send, nothing else.
      expect_overlap(comm.reduce_scatter(a, a + e, n, DType::F32, ReduceOp::Sum), rs,
                     "reduce_scatter recv one element into send");
      expect_overlap(comm.reduce_scatter(a, a + (n * w - 1) * e, n, DType::F32, ReduceOp::Sum), rs,
                     "reduce_scatter recv over the end of send");
      if (w > 1) {
        // The reported case: recv = send + ((rank + 1) % world) * count.
        expect_overlap(comm.reduce_scatter(a, a + ((r + 1) % w) * n * e, n, DType::F32, ReduceOp::Sum), rs,
                       "reduce_scatter recv = another rank's block of send");
      }
      if constexpr (Fx::host_memory) {
        std::vector<float> v(n * w + 1, 1.0f);
        const std::span<float> all(v.data(), n * w), shifted(v.data() + 1, n);
        expect_overlap(comm.reduce_scatter(all, shifted, polycoll::sum), rs, "typed reduce_scatter, op tag");
        expect_overlap(comm.reduce_scatter(all, shifted, ReduceOp::Sum), rs, "typed reduce_scatter, run-time op");
        expect_overlap(comm.all_gather(std::span<const float>(v.data() + 1, n), all), ag, "typed all_gather");
      }
      // all_to_all has no in-place form: even the same address is an overlap.
      const std::string aa = "all_to_all" + cnt + ")";
      expect_overlap(comm.all_to_all(a, a, n, DType::F32), aa, "all_to_all send == recv");
      expect_overlap(comm.all_to_all(a, a + e, n, DType::F32), aa, "all_to_all recv one element into send");
      // Rooted calls, root w - 1: the root checks its root-only buffer.
      const std::size_t root = w - 1;
      const std::string rt = ", root=" + std::to_string(root) + ")";
      if (r == root) {
        expect_overlap(comm.reduce(a, a + e, n, DType::F32, ReduceOp::Sum, root), "reduce" + cnt + ", op=sum" + rt,
                       "reduce recv one element into send");
        expect_overlap(comm.gather(a + (root * n + 1) * e, a, n, DType::F32, root), "gather" + cnt + rt,
                       "gather send one element past the root's block");
        expect_overlap(comm.scatter(a, a + (root * n + 1) * e, n, DType::F32, root), "scatter" + cnt + rt,
                       "scatter recv one element past the root's block");
        if (w > 1) {
          expect_overlap(comm.gather(a, a, n, DType::F32, root), "gather" + cnt + rt,
                         "gather send = another rank's block of recv");
          expect_overlap(comm.scatter(a, a, n, DType::F32, root), "scatter" + cnt + rt,
                         "scatter recv = another rank's block of send");
        }
      }
      rep.expect_ok(comm.barrier(), "barrier after the rejected calls");
      // The exact in-place forms are accepted (their values: the collectives' own tests).
      std::vector<float> ones(n * w, 1.0f);
      const std::uint64_t o = detail::to_address(ones.data());
      if constexpr (Fx::host_memory) {
        rep.expect_ok(comm.reduce_scatter(o, o + r * n * e, n, DType::F32, ReduceOp::Sum), "in-place reduce_scatter");
        // The all_gather reads the reduce_scatter's output: complete it first
        // (a posted collective's output is defined after sync(), as in MPI).
        rep.expect_ok(comm.sync(), "sync after the in-place reduce_scatter");
        rep.expect_ok(comm.all_gather(o + r * n * e, o, n, DType::F32), "in-place all_gather");
        rep.expect_ok(comm.sync(), "sync after the in-place forms");
        rep.expect(ones[r * n] == static_cast<float>(w) && ones[n * w - 1] == static_cast<float>(w),
                   "in-place reduce_scatter then all_gather values");
      }
    }
  });
}

}  // namespace polycoll::test::conformance

// Part two: reduce, gather, scatter, all_to_all, v-variants, send_recv, groups.
#include "conformance_collectives.hpp"
