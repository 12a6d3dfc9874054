#pragma once
// The conformance suite, second part: reduce, gather, scatter, all_to_all,
// the v-variants, send_recv and groups. Included by conformance.hpp (same
// fixture, same helpers); every expectation is closed-form in (world, rank, index).

namespace polycoll::test::conformance {
namespace {

constexpr std::size_t rooted_counts[] = {0, 7, 4097};

// Rank r's element i of the block it sends to rank q (all_to_all, v-variants).
template <class T>
T pair_value(std::size_t r, std::size_t q, std::size_t w, std::size_t i) {
  return movement_value<T>(r * w + q, i);
}

// all_gather_v: rank q contributes (3q + 2) % 5 elements; rank 1 (when there is one) none.
std::size_t gather_v_count(std::size_t q) { return q == 1 ? 0 : (3 * q + 2) % 5 + (q == 0 ? 4096 : 0); }
// all_to_all_v: rank r sends (r + 2q) % 4 elements to rank q.
std::size_t a2a_v_count(std::size_t r, std::size_t q) { return (r + 2 * q) % 4; }

// Displacements with a gap of 3 elements before each block, laid out in reverse
// rank order (so not ascending: the front end's pairwise overlap check runs).
std::vector<std::size_t> reversed_displs(const std::vector<std::size_t>& counts, std::size_t& extent) {
  std::vector<std::size_t> d(counts.size());
  std::size_t at = 0;
  for (std::size_t k = counts.size(); k-- > 0;) {
    at += 3;
    d[k] = at;
    at += counts[k];
  }
  extent = at;
  return d;
}

}  // namespace

TEST_CASE("reduce: every dtype, every valid op, every root, in place", "[conformance][reduce]" POLYCOLL_TAG) {
  each_world([](B& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    each_pair([&]<DType D, ReduceOp Op, class T>() {
      for (std::size_t n : rooted_counts) {
        for (std::size_t root = 0; root < w; ++root) {
          // In place at small counts on even roots and at the large count on
          // odd ones: MPICH's blocking MPI_Reduce faulted on MPI_IN_PLACE at a
          // root other than 0 from about 1000 elements.
          const bool in_place = (n == 7 && root % 2 == 0) || (n == 4097 && root % 2 == 1);
          Array<T> host(n);
          for (std::size_t i = 0; i < n; ++i) host[i] = input<T>(Op, w, r, i);
          Buf<T> send(n), recv(r == root ? n : 0);
          send.write(host);
          const std::uint64_t out = r != root ? 0 : in_place ? send.address() : recv.address();
          const auto what = ctx("reduce", D, n,
                                ", op=" + std::string(name(Op)) + ", root=" + std::to_string(root) +
                                    (in_place ? ", in place" : ""));
          rep.expect_ok(comm.reduce(send.address(), out, n, D, Op, root), what);
          rep.expect_ok(comm.sync(), what + " sync");
          if (r == root) check_reduced(rep, in_place ? send.read() : recv.read(), Op, w, 0, what);
        }
      }
    });
  });
}

TEST_CASE("gather and scatter: every dtype, every root, in place", "[conformance][gather][scatter]" POLYCOLL_TAG) {
  each_world([](B& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    each_dtype([&]<DType D, class T>() {
      for (std::size_t n : rooted_counts) {
        for (std::size_t root = 0; root < w; ++root) {
          const bool in_place = root % 2 == 1 || w == 1;
          // gather: rank q's block q of the root's recv.
          {
            Array<T> want(n * w);
            for (std::size_t q = 0; q < w; ++q)
              for (std::size_t i = 0; i < n; ++i) want[q * n + i] = movement_value<T>(q, i);
            Buf<T> send(n), recv(r == root ? n * w : 0);
            send.write(movement_block<T>(r, n));
            std::uint64_t in = send.address();
            if (r == root && in_place) {
              Array<T> seeded(n * w);
              for (std::size_t i = 0; i < n; ++i) seeded[r * n + i] = movement_value<T>(r, i);
              recv.write(seeded);
              in = recv.address() + r * n * sizeof(T);
            }
            const auto what = ctx("gather", D, n, ", root=" + std::to_string(root) + (in_place ? ", in place" : ""));
            rep.expect_ok(comm.gather(in, recv.address(), n, D, root), what);
            rep.expect_ok(comm.sync(), what + " sync");
            if (r == root) rep.expect_equal(recv.read(), want, what);
          }
          // scatter: the root's block q to rank q.
          {
            Buf<T> send(r == root ? n * w : 0), recv(n);
            if (r == root) {
              Array<T> all(n * w);
              for (std::size_t q = 0; q < w; ++q)
                for (std::size_t i = 0; i < n; ++i) all[q * n + i] = pair_value<T>(root, q, w, i);
              send.write(all);
            }
            const std::uint64_t out =
                r == root && in_place ? send.address() + r * n * sizeof(T) : recv.address();
            const auto what = ctx("scatter", D, n, ", root=" + std::to_string(root) + (in_place ? ", in place" : ""));
            rep.expect_ok(comm.scatter(send.address(), out, n, D, root), what);
            rep.expect_ok(comm.sync(), what + " sync");
            Array<T> got = recv.read();
            if (r == root && in_place) {
              const Array<T> all = send.read();
              for (std::size_t i = 0; i < n; ++i) got[i] = all[r * n + i];
            }
            Array<T> want(n);
            for (std::size_t i = 0; i < n; ++i) want[i] = pair_value<T>(root, r, w, i);
            rep.expect_equal(got, want, what);
          }
        }
      }
    });
  });
}

TEST_CASE("all_to_all: every dtype, every count", "[conformance][all_to_all]" POLYCOLL_TAG) {
  each_world([](B& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    each_dtype([&]<DType D, class T>() {
      for (std::size_t n : counts) {
        Array<T> mine(n * w), want(n * w);
        for (std::size_t q = 0; q < w; ++q) {
          for (std::size_t i = 0; i < n; ++i) {
            mine[q * n + i] = pair_value<T>(r, q, w, i);
            want[q * n + i] = pair_value<T>(q, r, w, i);
          }
        }
        Buf<T> send(n * w), recv(n * w);
        send.write(mine);
        const auto what = ctx("all_to_all", D, n);
        rep.expect_ok(comm.all_to_all(send.address(), recv.address(), n, D), what);
        rep.expect_ok(comm.sync(), what + " sync");
        rep.expect_equal(recv.read(), want, what);
      }
    });
  });
}

TEST_CASE("all_gather_v: zero counts, packed and reversed displacements, in place",
          "[conformance][all_gather_v]" POLYCOLL_TAG) {
  each_world([](B& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    std::vector<std::size_t> cnt(w);
    for (std::size_t q = 0; q < w; ++q) cnt[q] = gather_v_count(q);
    each_dtype([&]<DType D, class T>() {
      for (int layout = 0; layout < 3; ++layout) {  // packed, reversed with gaps, packed in place
        std::size_t extent = 0;
        std::vector<std::size_t> displs;
        if (layout == 1) {
          displs = reversed_displs(cnt, extent);
        } else {
          for (std::size_t q = 0; q < w; ++q) extent += cnt[q];
        }
        std::vector<std::size_t> at(w);
        for (std::size_t q = 0, run = 0; q < w; ++q) {
          at[q] = displs.empty() ? run : displs[q];
          run += cnt[q];
        }
        Array<T> want(extent);
        for (std::size_t q = 0; q < w; ++q)
          for (std::size_t i = 0; i < cnt[q]; ++i) want[at[q] + i] = movement_value<T>(q, i);
        Buf<T> send(cnt[r]), recv(extent);
        send.write(movement_block<T>(r, cnt[r]));
        std::uint64_t in = send.address();
        if (layout == 2) {
          Array<T> seeded(extent);
          for (std::size_t i = 0; i < cnt[r]; ++i) seeded[at[r] + i] = movement_value<T>(r, i);
          recv.write(seeded);
          in = recv.address() + at[r] * sizeof(T);
        }
        const auto what = ctx("all_gather_v", D, cnt[r], layout == 1 ? ", reversed" : layout == 2 ? ", in place" : "");
        rep.expect_ok(comm.all_gather_v(in, cnt[r], recv.address(), cnt, displs, D), what);
        rep.expect_ok(comm.sync(), what + " sync");
        rep.expect_equal(recv.read(), want, what);
      }
    });
  });
}

TEST_CASE("all_to_all_v: zero counts, packed and reversed displacements", "[conformance][all_to_all_v]" POLYCOLL_TAG) {
  each_world([](B& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    std::vector<std::size_t> sc(w), rc(w);
    for (std::size_t q = 0; q < w; ++q) {
      sc[q] = a2a_v_count(r, q) + (q == 0 ? 4096 : 0);
      rc[q] = a2a_v_count(q, r) + (r == 0 ? 4096 : 0);
    }
    each_dtype([&]<DType D, class T>() {
      for (bool reversed : {false, true}) {
        std::size_t s_extent = 0, r_extent = 0;
        std::vector<std::size_t> sd, rd;
        if (reversed) {
          sd = reversed_displs(sc, s_extent);
          rd = reversed_displs(rc, r_extent);
        } else {
          for (std::size_t q = 0; q < w; ++q) {
            s_extent += sc[q];
            r_extent += rc[q];
          }
        }
        auto place = [&](const std::vector<std::size_t>& c, const std::vector<std::size_t>& dd, std::size_t q) {
          std::size_t run = 0;
          for (std::size_t k = 0; k < q; ++k) run += c[k];
          return dd.empty() ? run : dd[q];
        };
        Array<T> mine(s_extent), want(r_extent);
        for (std::size_t q = 0; q < w; ++q) {
          for (std::size_t i = 0; i < sc[q]; ++i) mine[place(sc, sd, q) + i] = pair_value<T>(r, q, w, i);
          for (std::size_t i = 0; i < rc[q]; ++i) want[place(rc, rd, q) + i] = pair_value<T>(q, r, w, i);
        }
        Buf<T> send(s_extent), recv(r_extent);
        send.write(mine);
        const auto what = ctx("all_to_all_v", D, s_extent, reversed ? ", reversed" : "");
        rep.expect_ok(comm.all_to_all_v(send.address(), sc, sd, recv.address(), rc, rd, D), what);
        rep.expect_ok(comm.sync(), what + " sync");
        rep.expect_equal(recv.read(), want, what);
      }
    });
  });
}

TEST_CASE("send_recv and groups: ring, exchange at 1 MiB, recv-first patterns", "[conformance][group]" POLYCOLL_TAG) {
  each_world([](B& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    const std::size_t next = (r + 1) % w, prev = (r + w - 1) % w;
    // send_recv around the ring, every dtype.
    each_dtype([&]<DType D, class T>() {
      for (std::size_t n : {std::size_t{0}, std::size_t{5}}) {
        Buf<T> out(n), in(n);
        out.write(movement_block<T>(r, n));
        const auto what = ctx("send_recv ring", D, n);
        rep.expect_ok(comm.send_recv(out.address(), n, next, in.address(), n, prev, D, 4), what);
        rep.expect_ok(comm.sync(), what + " sync");
        rep.expect_equal(in.read(), movement_block<T>(prev, n), what);
      }
    });
    // send_recv exchange far above any eager threshold.
    {
      const std::size_t n = (1u << 20) / sizeof(float);
      const std::size_t partner = (r % 2 == 0) ? std::min(r + 1, w - 1) : r - 1;
      Buf<float> out(n), in(n);
      out.write(movement_block<float>(r, n));
      rep.expect_ok(comm.send_recv(out.address(), n, partner, in.address(), n, partner, DType::F32, 2),
                    "send_recv exchange");
      rep.expect_ok(comm.sync(), "send_recv exchange sync");
      rep.expect_equal(in.read(), movement_block<float>(partner, n), "send_recv exchange 1 MiB");
    }
    // A group: every rank receives from every peer first, then sends, all of
    // 256 KiB; one batch, one sync. Without batching (blocking p2p) this
    // pattern deadlocks.
    {
      const std::size_t n = (1u << 18) / sizeof(std::int32_t);
      std::vector<Buf<std::int32_t>> outs, ins;
      outs.reserve(w);
      ins.reserve(w);
      {
        auto g = comm.group();
        rep.expect(g.open(), "group open");
        for (std::size_t k = 1; k <= w; ++k) {
          const std::size_t q = (r + k) % w;
          ins.emplace_back(n);
          rep.expect_ok(comm.recv(ins.back().address(), n, DType::I32, q, 11), "group recv");
        }
        for (std::size_t k = 1; k <= w; ++k) {
          const std::size_t q = (r + w - k) % w;
          outs.emplace_back(n);
          outs.back().write(movement_block<std::int32_t>(r * w + q, n));
          rep.expect_ok(comm.send(outs.back().address(), n, DType::I32, q, 11), "group send");
        }
        rep.expect_ok(g.end(), "group end");
        const Status twice = g.end();
        rep.expect(!twice && twice.error().code == Errc::invalid_argument, "group ended twice must fail");
      }
      rep.expect_ok(comm.sync(), "group sync");
      for (std::size_t k = 1; k <= w; ++k) {
        const std::size_t q = (r + k) % w;
        rep.expect_equal(ins[k - 1].read(), movement_block<std::int32_t>(q * w + r, n),
                         "group recv from rank " + std::to_string(q));
      }
    }
    // Nested groups: only the outermost end issues; an unmatched end fails.
    {
      rep.expect_ok(comm.group_start(), "outer group_start");
      rep.expect_ok(comm.group_start(), "inner group_start");
      Buf<std::int64_t> out(3), in(3);
      out.write(movement_block<std::int64_t>(r, 3));
      rep.expect_ok(comm.send_recv(out.address(), 3, next, in.address(), 3, prev, DType::I64, 5), "nested send_recv");
      rep.expect_ok(comm.group_end(), "inner group_end");
      rep.expect_ok(comm.group_end(), "outer group_end");
      rep.expect_ok(comm.sync(), "nested sync");
      rep.expect_equal(in.read(), movement_block<std::int64_t>(prev, 3), "nested group");
      const Status unmatched = comm.group_end();
      rep.expect(!unmatched && unmatched.error().code == Errc::invalid_argument &&
                     unmatched.error().message.find("group_end") != std::string::npos,
                 "group_end without group_start must fail");
    }
    rep.expect_ok(comm.barrier(), "barrier after groups");
  });
}

TEST_CASE("typed surface of the extra collectives", "[conformance][typed]" POLYCOLL_TAG) {
  if constexpr (Fx::host_memory) {
    each_world([](B& comm, Report& rep) {
      const std::size_t w = comm.world_size(), r = comm.rank();
      const std::size_t root = w - 1;
      std::vector<double> mine(3, static_cast<double>(r + 1)), total(r == root ? 3 : 0);
      rep.expect_ok(comm.reduce(std::span<const double>(mine), std::span<double>(total), polycoll::sum, root),
                    "typed reduce");
      std::vector<std::int16_t> one(2, static_cast<std::int16_t>(r)), all(r == 0 ? 2 * w : 0);
      rep.expect_ok(comm.gather(std::span<const std::int16_t>(one), std::span<std::int16_t>(all), 0), "typed gather");
      std::vector<float> parts(r == 0 ? w : 0), part(1);
      for (std::size_t q = 0; q < parts.size(); ++q) parts[q] = static_cast<float>(10 * q);
      rep.expect_ok(comm.scatter(std::span<const float>(parts), std::span<float>(part), 0), "typed scatter");
      std::vector<std::uint32_t> a2a_in(w), a2a_out(w);
      for (std::size_t q = 0; q < w; ++q) a2a_in[q] = static_cast<std::uint32_t>(100 * r + q);
      rep.expect_ok(comm.all_to_all(std::span<const std::uint32_t>(a2a_in), std::span<std::uint32_t>(a2a_out)),
                    "typed all_to_all");
      std::vector<std::size_t> counts(w);
      for (std::size_t q = 0; q < w; ++q) counts[q] = q;
      std::vector<std::int64_t> vin(r, static_cast<std::int64_t>(r)), vout(w * (w - 1) / 2);
      rep.expect_ok(comm.all_gather_v(std::span<const std::int64_t>(vin), std::span<std::int64_t>(vout), counts),
                    "typed all_gather_v");
      std::vector<std::size_t> ones(w, 1);
      std::vector<std::uint8_t> vs(w), vr(w);
      for (std::size_t q = 0; q < w; ++q) vs[q] = static_cast<std::uint8_t>(r + q);
      rep.expect_ok(comm.all_to_all_v(std::span<const std::uint8_t>(vs), ones, std::span<std::uint8_t>(vr), ones),
                    "typed all_to_all_v");
      std::array<bf16, 2> out{bf16(static_cast<float>(r)), bf16(1.0f)}, in{};
      rep.expect_ok(comm.send_recv(std::span<const bf16>(out), (r + 1) % w, std::span<bf16>(in), (r + w - 1) % w, 3),
                    "typed send_recv");
      rep.expect_ok(comm.sync(), "sync");
      if (r == root) rep.expect(total[2] == static_cast<double>(w * (w + 1) / 2), "typed reduce value");
      if (r == 0) rep.expect(all[2 * (w - 1)] == static_cast<std::int16_t>(w - 1), "typed gather value");
      rep.expect(part[0] == static_cast<float>(10 * r), "typed scatter value");
      rep.expect(a2a_out[w - 1] == static_cast<std::uint32_t>(100 * (w - 1) + r), "typed all_to_all value");
      if (w > 1) rep.expect(vout.back() == static_cast<std::int64_t>(w - 1), "typed all_gather_v value");
      rep.expect(vr[w - 1] == static_cast<std::uint8_t>(w - 1 + r), "typed all_to_all_v value");
      rep.expect(static_cast<float>(in[0]) == static_cast<float>((r + w - 1) % w), "typed send_recv value");

      // Span sizes are checked against the world and the counts. A root-only
      // check fails on the root alone (the others would wait in the
      // collective, as under MPI), so it is asked of a world of one.
      if (w == 1) {
        std::vector<std::int16_t> short_all(1);
        const Status g = comm.gather(std::span<const std::int16_t>(one), std::span<std::int16_t>(short_all), 0);
        rep.expect(!g && g.error().code == Errc::invalid_argument, "gather recv span too small");
      }
      std::vector<std::int64_t> short_v(vout.size() == 0 ? 0 : vout.size() - 1);
      if (w > 1) {
        const Status v = comm.all_gather_v(std::span<const std::int64_t>(vin), std::span<std::int64_t>(short_v), counts);
        rep.expect(!v && v.error().code == Errc::invalid_argument, "all_gather_v recv span too small");
      }
      std::vector<std::uint32_t> odd(w + 1);
      const Status a = comm.all_to_all(std::span<const std::uint32_t>(odd), std::span<std::uint32_t>(odd));
      rep.expect(!a && a.error().code == Errc::invalid_argument, "all_to_all span not a multiple of world");
      rep.expect_ok(comm.barrier(), "barrier");
    });
  }
}

// Out of place (MPI_Allreduce(send, recv)) and in place through send == recv,
// on the seed surface, for a few (dtype, op) pairs whose paths differ on Mpi
// at 2 ranks (exchange, shared window, halving, MPI's own) and counts across
// those paths' thresholds; send must be left as it was.
TEST_CASE("all_reduce out of place", "[conformance][all_reduce]" POLYCOLL_TAG) {
  each_world([](B& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    auto run = [&]<DType D, ReduceOp Op>(dtype_tag<D>, op_tag<Op>) {
      using T = typename dtype_tag<D>::type;
      if constexpr (supports_reduction_v<B, D, Op>) {
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{2048}, std::size_t{4097},
                              std::size_t{70000}}) {
          Array<T> host(n);
          for (std::size_t i = 0; i < n; ++i) host[i] = input<T>(Op, w, r, i);
          Buf<T> send(n), recv(n);
          send.write(host);
          const auto what = ctx("all_reduce", D, n, ", op=" + std::string(name(Op)) + ", out of place");
          rep.expect_ok(comm.all_reduce(send.address(), recv.address(), n, D, Op), what);
          rep.expect_ok(comm.sync(), what + " sync");
          check_reduced(rep, recv.read(), Op, w, 0, what);
          rep.expect_equal(send.read(), host, what + ": send must be unchanged");
          const auto in_place = ctx("all_reduce", D, n, ", op=" + std::string(name(Op)) + ", send == recv");
          rep.expect_ok(comm.all_reduce(send.address(), send.address(), n, D, Op), in_place);
          rep.expect_ok(comm.sync(), in_place + " sync");
          check_reduced(rep, send.read(), Op, w, 0, in_place);
        }
      }
    };
    run(dtype_tag<DType::F32>{}, op_tag<ReduceOp::Sum>{});
    run(dtype_tag<DType::F16>{}, op_tag<ReduceOp::Sum>{});
    run(dtype_tag<DType::I64>{}, op_tag<ReduceOp::Max>{});
    run(dtype_tag<DType::F64>{}, op_tag<ReduceOp::Avg>{});

    // A partial overlap is an error on every rank (it is checked before any
    // communication), as is a null send with a count.
    Buf<float> buf(16);
    const std::uint64_t a = buf.address();
    const Status overlap = comm.all_reduce(a, a + 4 * sizeof(float), 8, DType::F32, ReduceOp::Sum);
    rep.expect(!overlap && overlap.error().code == Errc::invalid_argument &&
                   overlap.error().message.find("overlap") != std::string::npos &&
                   overlap.error().message.find("all_reduce(count=8, dtype=f32, op=sum)") != std::string::npos,
               "all_reduce partial overlap must be invalid_argument naming the call: " +
                   (overlap ? std::string("succeeded") : overlap.error().message));
    const Status null_send = comm.all_reduce(0, a, 4, DType::F32, ReduceOp::Sum);
    rep.expect(!null_send && null_send.error().message.find("send buffer is null") != std::string::npos,
               "all_reduce null send");
    const Status bad_op = comm.all_reduce(a, a + 8 * sizeof(float), 4, DType::I32, ReduceOp::Avg);
    rep.expect(!bad_op && bad_op.error().code == Errc::invalid_argument, "all_reduce avg on i32 out of place");
    rep.expect_ok(comm.barrier(), "barrier");
  });
}

// all_reduce_value returns the reduced value, complete, on every backend (on
// Nccl from host memory through the device); the typed out-of-place call and
// the standard integer types other than the exact-width ones (long long,
// char, unsigned short) on host-memory backends.
TEST_CASE("all_reduce_value and the typed out-of-place all_reduce", "[conformance][all_reduce]" POLYCOLL_TAG) {
  each_world([](B& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    const auto tri = static_cast<long long>(w * (w + 1) / 2);
    auto check_value = [&](const auto& got, auto want, const std::string& what) {
      rep.expect(got.has_value(), what + (got ? "" : ": " + got.error().message));
      if (got) rep.expect(*got == want, what + ": wrong value");
    };
    check_value(comm.all_reduce_value(static_cast<float>(r + 1), polycoll::sum), static_cast<float>(tri),
                "all_reduce_value(float, sum)");
    check_value(comm.all_reduce_value(static_cast<long long>(r) - 5, polycoll::max),
                static_cast<long long>(w) - 6, "all_reduce_value(long long, max)");
    check_value(comm.all_reduce_value(2.0 * static_cast<double>(r), ReduceOp::Avg), static_cast<double>(w) - 1.0,
                "all_reduce_value(double, run-time avg)");
    check_value(comm.all_reduce_value(r == 0, ReduceOp::Max), true, "all_reduce_value(bool, run-time max)");
    const auto bad = comm.all_reduce_value(3, ReduceOp::Avg);
    rep.expect(!bad && bad.error().code == Errc::invalid_argument &&
                   bad.error().message.find("op avg is not defined for dtype i32") != std::string::npos,
               "all_reduce_value(int, avg) must be invalid_argument");
    // Seed form: the element at a host address.
    std::uint16_t u = static_cast<std::uint16_t>(r + 1);
    rep.expect_ok(comm.all_reduce_value(detail::to_address(&u), DType::U16, ReduceOp::Prod), "seed all_reduce_value");
    std::uint16_t fact = 1;
    for (std::size_t q = 1; q <= w; ++q) fact = static_cast<std::uint16_t>(fact * q);
    rep.expect(u == fact, "seed all_reduce_value(u16, prod) value");
    const Status null_value = comm.all_reduce_value(0, DType::F32, ReduceOp::Sum);
    rep.expect(!null_value && null_value.error().code == Errc::invalid_argument, "seed all_reduce_value(null)");

    if constexpr (Fx::host_memory) {
      std::vector<long long> send(5), recv(5);
      for (std::size_t i = 0; i < 5; ++i) send[i] = static_cast<long long>(r * 10 + i);
      const std::vector<long long> sent = send;
      rep.expect_ok(comm.all_reduce(std::span<const long long>(send), std::span<long long>(recv), polycoll::max),
                    "typed all_reduce(long long, max) out of place");
      rep.expect_ok(comm.sync(), "sync");
      rep.expect(recv[4] == static_cast<long long>((w - 1) * 10 + 4) && send == sent,
                 "typed all_reduce(long long) values, send unchanged");
      std::vector<unsigned short> us(3, static_cast<unsigned short>(r + 1));
      rep.expect_ok(comm.all_reduce(us, us, ReduceOp::Sum), "typed all_reduce(unsigned short, run-time sum) in place");
      std::vector<char> cs(2, static_cast<char>(1));
      std::vector<char> csum(2);
      rep.expect_ok(comm.all_reduce(cs, csum, ReduceOp::Sum), "typed all_reduce(char, run-time sum)");
      rep.expect_ok(comm.sync(), "sync");
      rep.expect(us[2] == static_cast<unsigned short>(tri), "typed all_reduce(unsigned short) value");
      rep.expect(csum[1] == static_cast<char>(w), "typed all_reduce(char) value");
      std::vector<long long> shorter(4);
      const Status size = comm.all_reduce(std::span<const long long>(send), std::span<long long>(shorter), polycoll::sum);
      rep.expect(!size && size.error().message.find("recv.size() 4 differs from send.size() 5") != std::string::npos,
                 "typed all_reduce recv size");
      const Status part = comm.all_reduce(std::span<long long>(send).first(4), std::span<long long>(send).last(4),
                                          polycoll::sum);
      rep.expect(!part && part.error().code == Errc::invalid_argument, "typed all_reduce partial overlap");

      // The value form completes like sync(): work posted before it is complete when it returns.
      std::vector<float> posted(3, 1.0f);
      rep.expect_ok(comm.all_reduce(posted, polycoll::sum), "posted all_reduce");
      check_value(comm.all_reduce_value(1, polycoll::sum), static_cast<int>(w), "all_reduce_value after posted work");
      rep.expect(posted[2] == static_cast<float>(w), "all_reduce_value completed the earlier posted all_reduce");
    }
    rep.expect_ok(comm.barrier(), "barrier");
  });
}

TEST_CASE("bad input to the extra collectives is an Error", "[conformance][errors]" POLYCOLL_TAG) {
  each_world([](B& comm, Report& rep) {
    const std::size_t w = comm.world_size(), r = comm.rank();
    Buf<float> buf(4 * w + 4);
    const std::uint64_t a = buf.address();
    auto expect_error = [&](const auto& s, Errc code, const std::string& needle, const std::string& what) {
      conformance::expect_error(rep, w, s, code, needle, what);
    };
    expect_error(comm.reduce(a, a, 4, DType::F32, ReduceOp::Sum, w), Errc::invalid_argument,
                 "reduce(count=4, dtype=f32, op=sum, root=" + std::to_string(w) + ")", "reduce root out of range");
    expect_error(comm.reduce(a, a, 4, DType::C64, ReduceOp::Max, 0), Errc::invalid_argument, "op=max",
                 "reduce max on complex");
    expect_error(comm.gather(0, a, 4, DType::F32, 0), Errc::invalid_argument, "send buffer is null", "gather null send");
    if (r == 0) {
      expect_error(comm.reduce(a, a + 4, 4, DType::F32, ReduceOp::Sum, 0), Errc::invalid_argument, "overlap",
                   "reduce recv overlapping send");
      expect_error(comm.scatter(0, a, 4, DType::F32, 0), Errc::invalid_argument, "send buffer is null",
                   "scatter null send at the root");
    }
    expect_error(comm.scatter(a, a, 4, DType::F32, w + 1), Errc::invalid_argument, "root", "scatter root out of range");
    expect_error(comm.all_to_all(a, a + 2, 1, DType::F32), Errc::invalid_argument, "overlap", "all_to_all overlap");
    expect_error(comm.all_to_all(a, a, SIZE_MAX / 2, DType::F64), Errc::invalid_argument, "overflows",
                 "all_to_all overflow");
    std::vector<std::size_t> short_counts(w + 1, 1);
    expect_error(comm.all_gather_v(a, 1, a + 64, short_counts, {}, DType::F32), Errc::invalid_argument,
                 "one count per rank", "all_gather_v counts of the wrong size");
    std::vector<std::size_t> counts(w, 1), wrong_counts(w, 2);
    expect_error(comm.all_gather_v(a, 2, a + 64, counts, {}, DType::F32), Errc::invalid_argument, "send_count 2",
                 "all_gather_v send_count differs from recv_counts[rank]");
    if (w > 1) {
      const std::vector<std::size_t> clash(w, 0);  // every block at offset 0: not ascending, so checked pairwise
      expect_error(comm.all_to_all_v(a, counts, {}, a + 4 * w + 16, counts, clash, DType::F32), Errc::invalid_argument,
                   "overlapping", "all_to_all_v overlapping recv blocks");
    }
    std::vector<std::size_t> huge(w, SIZE_MAX / 2);
    expect_error(comm.all_to_all_v(a, huge, {}, a, counts, {}, DType::F32), Errc::invalid_argument, "overflow",
                 "all_to_all_v count overflow");
    expect_error(comm.all_to_all_v(a, counts, {}, a, counts, {}, static_cast<DType>(99)), Errc::invalid_argument,
                 "overlap", "all_to_all_v send/recv overlap");
    expect_error(comm.send_recv(a, 1, w, a + 16, 1, 0, DType::F32, 1), Errc::invalid_argument, "dest",
                 "send_recv dest out of range");
    expect_error(comm.send_recv(a, 1, 0, a + 16, 1, w + 2, DType::F32, 1), Errc::invalid_argument, "src",
                 "send_recv src out of range");
    expect_error(comm.send_recv(a, 4, 0, a + 4, 4, 0, DType::F32, 1), Errc::invalid_argument, "overlap",
                 "send_recv overlapping buffers");
    expect_error(comm.gather(a, a + 64, 1, static_cast<DType>(77), 0), Errc::invalid_argument, "unknown DType value",
                 "gather unknown dtype");
    rep.expect_ok(comm.barrier(), "barrier after bad input");
  });
}

}  // namespace polycoll::test::conformance
