// mpi_policies: chooses the Mpi backend's default policies by measurement.
//
// One binary, every variant interleaved round by round with the raw MPI call,
// so the 1.5-4x drift of absolute times on a shared machine cancels in the
// ratios: each round times a batch of calls of every variant (the order
// rotates per round; one untimed call precedes each batch), the time of a
// batch is the max over ranks, and each
// variant's figure is the median over rounds of (its time / raw MPI_Allreduce
// time in the same round).
//
//   mpiexec.mpich -n 2 mpi_policies [--quick] [--rounds R] [--csv FILE]
//   mpiexec.openmpi --oversubscribe -n 2 mpi_policies
//
// All calls are in-place f32 sums on zeros (constant cost per element) unless
// named bf16; "bf16 vs f32" compares the same element count. "raw
// MPI_Allreduce bf16 op" is MPI's allreduce with polycoll's (dispatched) bf16
// op, the call `Mpi` makes at 3+ ranks and for 2 ranks on different nodes
// (on one node, up to 4 MiB, it reduces through the shared-memory window of
// backends/mpi/shm.hpp); "halving sendrecv" is the library's 2-rank
// halving called directly (see the comment at its use); "raw bf16
// baseline-target op" is MPI_Allreduce with the bf16 sum compiled for the
// build's target only (no AVX2 dispatch); "RSB+Allgather" composes the
// allreduce from MPI_Reduce_scatter_block and MPI_Allgather.
#include <polycoll/backends/mpi.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

using namespace polycoll;
using Clock = std::chrono::steady_clock;

using BlBuiltin = BasicMpi<mpi::Policies<mpi::blocking, mpi::builtin_ops>>;
using BlKernel = BasicMpi<mpi::Policies<mpi::blocking, mpi::kernel_ops>>;
using NbBuiltin = BasicMpi<mpi::Policies<mpi::nonblocking, mpi::builtin_ops>>;
using NbKernel = BasicMpi<mpi::Policies<mpi::nonblocking, mpi::kernel_ops>>;

// The bf16 sum op compiled for the build's own target only (no AVX2 dispatch):
// what the dispatch gains, measured in the same rounds.
void baseline_sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  detail::mpi::reduce_body<DType::BF16, ReduceOp::Sum>(in, inout, static_cast<std::size_t>(*len));
}

void kernel_sum_f32(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* io = static_cast<float*>(inout);
  kernels::combine(dtype_tag<DType::F32>{}, polycoll::sum, io, io, static_cast<const float*>(in),
                   static_cast<std::size_t>(*len));
}

struct Variant {
  std::string name;
  std::function<bool()> call;  // one operation, complete on return
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

std::string human(std::size_t bytes) {
  if (bytes >= (1u << 20)) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1u << 10)) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

}  // namespace

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  if (!env.ok()) {
    std::fprintf(stderr, "%s\n", env.status().error().message.c_str());
    return 1;
  }
  bool quick = false;
  int rounds = 21;
  const char* csv_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--csv") && i + 1 < argc) csv_path = argv[++i];
  }
  if (quick) rounds = 3;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  auto bl_builtin = BlBuiltin::world();
  auto bl_kernel = BlKernel::world();
  auto nb_builtin = NbBuiltin::world();
  auto nb_kernel = NbKernel::world();
  auto deflt = Mpi::world();
  if (!bl_builtin || !bl_kernel || !nb_builtin || !nb_kernel || !deflt) {
    std::fprintf(stderr, "Mpi::world failed\n");
    return 1;
  }
  MPI_Comm raw;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  MPI_Op raw_user_op;
  MPI_Op_create(&kernel_sum_f32, 1, &raw_user_op);
  MPI_Op raw_bf16_baseline_op;
  MPI_Op_create(&baseline_sum_bf16, 1, &raw_bf16_baseline_op);

  std::vector<std::size_t> sizes = {8, 16u << 10, 64u << 10, 1u << 20, 4u << 20, 16u << 20};
  if (quick) sizes = {8, 64u << 10};
  FILE* csv = (rank == 0 && csv_path) ? std::fopen(csv_path, "w") : nullptr;
  if (csv) std::fprintf(csv, "mpi,ranks,bytes,variant,median_us,ratio_vs_raw\n");
  if (rank == 0) {
    std::printf("# mpi_policies: %s, %d ranks, %d rounds, in-place f32 sum unless noted\n",
#if defined(MPICH_VERSION)
                "MPICH " MPICH_VERSION,
#elif defined(OMPI_MAJOR_VERSION)
                "Open MPI",
#else
                "MPI",
#endif
                size, rounds);
    std::printf("# %-9s %-28s %12s %14s\n", "size", "variant", "median_us", "ratio_vs_raw");
  }

  for (const std::size_t bytes : sizes) {
    const std::size_t n = bytes / sizeof(float);
    const int ni = static_cast<int>(n);
    std::vector<float> f(n, 0.0f);
    std::vector<bf16> h(n, bf16(0.0f));
    const std::span<float> fs(f);
    const std::span<bf16> hs(h);
    // Allreduce composed as MPI_Reduce_scatter_block + MPI_Allgather (both in
    // place; the reduced block moved to the rank's slot in between): each rank
    // reduces 1/size of the elements, whatever algorithm MPI_Allreduce picks
    // for the op. Timed only where size divides the count.
    auto rsag = [&](void* buf, std::size_t cnt, MPI_Datatype dt, std::size_t es, MPI_Op op) {
      const std::size_t blk = cnt / static_cast<std::size_t>(size);
      const int nb = static_cast<int>(blk);
      int rc = MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, nb, dt, op, raw);
      auto* b = static_cast<char*>(buf);
      if (rank != 0) std::memcpy(b + static_cast<std::size_t>(rank) * blk * es, b, blk * es);
      rc |= MPI_Allgather(MPI_IN_PLACE, 0, dt, buf, nb, dt, raw);
      return rc == MPI_SUCCESS;
    };
    std::vector<Variant> vs = {
        {"raw MPI_Allreduce", [&] { return MPI_Allreduce(MPI_IN_PLACE, f.data(), ni, MPI_FLOAT, MPI_SUM, raw) == 0; }},
        {"raw MPI_Iallreduce+Wait",
         [&] {
           MPI_Request r;
           MPI_Iallreduce(MPI_IN_PLACE, f.data(), ni, MPI_FLOAT, MPI_SUM, raw, &r);
           return MPI_Wait(&r, MPI_STATUS_IGNORE) == 0;
         }},
        {"raw MPI_Allreduce user-op",
         [&] { return MPI_Allreduce(MPI_IN_PLACE, f.data(), ni, MPI_FLOAT, raw_user_op, raw) == 0; }},
        {"blocking+builtin", [&] { return bl_builtin->all_reduce(fs, polycoll::sum) && bl_builtin->sync(); }},
        {"blocking+kernel", [&] { return bl_kernel->all_reduce(fs, polycoll::sum) && bl_kernel->sync(); }},
        {"nonblocking+builtin", [&] { return nb_builtin->all_reduce(fs, polycoll::sum) && nb_builtin->sync(); }},
        {"nonblocking+kernel", [&] { return nb_kernel->all_reduce(fs, polycoll::sum) && nb_kernel->sync(); }},
        {"default Mpi f32", [&] { return deflt->all_reduce(fs, polycoll::sum) && deflt->sync(); }},
        {"default Mpi bf16", [&] { return deflt->all_reduce(hs, polycoll::sum) && deflt->sync(); }},
        {"raw MPI_Allreduce bf16 op",
         [&] {
           int op_rc = MPI_SUCCESS;
           const MPI_Op op = detail::mpi::user_op<DType::BF16, ReduceOp::Sum>(op_rc);
           return MPI_Allreduce(MPI_IN_PLACE, h.data(), ni, MPI_UINT16_T, op, raw) == 0;
         }},
        {"raw bf16 baseline-target op",
         [&] { return MPI_Allreduce(MPI_IN_PLACE, h.data(), ni, MPI_UINT16_T, raw_bf16_baseline_op, raw) == 0; }},
    };
    // The library's 2-rank point-to-point halving (backends/mpi/halving.hpp)
    // called directly, on every MPI (Mpi takes it on MPICH, for ranks on
    // different nodes or above the shared-memory window's 4 MiB; on one node
    // below that, the "default" and "kernel" variants use the window): exchange halves with
    // MPI_Sendrecv, reduce this rank's half with polycoll's unit, exchange the
    // reduced halves: the bytes of MPICH's recursive doubling (n per rank), half
    // its reduction work, one more message round.
    std::vector<std::byte> halving_scratch;
    if (size == 2) {
      const auto r = static_cast<std::size_t>(rank);
      vs.push_back({"halving sendrecv f32 (unit)", [&, r] {
                      return detail::mpi::halving_allreduce_2<DType::F32, ReduceOp::Sum>(f.data(), n, r, raw,
                                                                                          halving_scratch) == 0;
                    }});
      vs.push_back({"halving sendrecv bf16 (op)", [&, r] {
                      return detail::mpi::halving_allreduce_2<DType::BF16, ReduceOp::Sum>(h.data(), n, r, raw,
                                                                                           halving_scratch) == 0;
                    }});
    }
    if (n % static_cast<std::size_t>(size) == 0) {
      int op_rc = MPI_SUCCESS;
      const MPI_Op bf16_op = detail::mpi::user_op<DType::BF16, ReduceOp::Sum>(op_rc);
      vs.push_back({"RSB+Allgather builtin f32", [&] { return rsag(f.data(), n, MPI_FLOAT, 4, MPI_SUM); }});
      vs.push_back({"RSB+Allgather user-op f32", [&] { return rsag(f.data(), n, MPI_FLOAT, 4, raw_user_op); }});
      vs.push_back({"RSB+Allgather bf16 op", [&, bf16_op] { return rsag(h.data(), n, MPI_UINT16_T, 2, bf16_op); }});
    }
    // Batch length: about 20 ms of raw calls, same on every
    // rank. The probe doubles its call count until the slowest rank has spent
    // 5 ms: every rank makes the same calls (a loop ended by each rank's own
    // clock would leave one rank in a collective the others never enter).
    for (auto& v : vs) v.call();  // warm: first touch, op creation
    double per = 0.0;
    for (int probe = 2;; probe *= 2) {
      const auto t0 = Clock::now();
      for (int i = 0; i < probe; ++i) vs[0].call();
      double spent = std::chrono::duration<double>(Clock::now() - t0).count();
      MPI_Allreduce(MPI_IN_PLACE, &spent, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      per = spent / probe;
      if (spent >= 0.005 || probe >= (1 << 20)) break;
    }
    // At least 8 calls per batch (16 MiB: ~50 ms), so one slow call moves a
    // batch's time by an eighth at most.
    const double batch_s = quick ? 0.002 : 0.02;
    const int iters = std::max(quick ? 1 : 8, std::min(20000, static_cast<int>(batch_s / per)));

    std::vector<std::vector<double>> times(vs.size()), ratios(vs.size());
    bool ok = true;
    for (int round = 0; round < rounds; ++round) {
      std::vector<double> t(vs.size());
      for (std::size_t k = 0; k < vs.size(); ++k) {
        const std::size_t j = (k + static_cast<std::size_t>(round)) % vs.size();
        // One untimed call first: a batch does not pay for the state the
        // variant before it left (with ~3 calls per batch at 16 MiB on Open
        // MPI, the identical MPI_Allreduce measured 0.73-1.12 of raw depending
        // on its predecessor without it; docs/mpi.md).
        ok &= vs[j].call();
        MPI_Barrier(MPI_COMM_WORLD);
        const auto a = Clock::now();
        for (int i = 0; i < iters; ++i) ok &= vs[j].call();
        double dt = std::chrono::duration<double>(Clock::now() - a).count() / iters;
        MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        t[j] = dt;
      }
      for (std::size_t j = 0; j < vs.size(); ++j) {
        times[j].push_back(t[j] * 1e6);
        ratios[j].push_back(t[j] / t[0]);
      }
    }
    if (!ok) std::fprintf(stderr, "rank %d: a call failed at %zu bytes\n", rank, bytes);
    if (rank == 0) {
      for (std::size_t j = 0; j < vs.size(); ++j) {
        std::printf("  %-9s %-28s %12.3f %14.3f\n", human(bytes).c_str(), vs[j].name.c_str(), median(times[j]),
                    median(ratios[j]));
        if (csv)
          std::fprintf(csv, "%s,%d,%zu,%s,%.4f,%.4f\n",
#if defined(MPICH_VERSION)
                       "mpich",
#else
                       "openmpi",
#endif
                       size, bytes, vs[j].name.c_str(), median(times[j]), median(ratios[j]));
      }
      std::fflush(stdout);
    }
  }
  if (csv) std::fclose(csv);
  MPI_Op_free(&raw_user_op);
  MPI_Op_free(&raw_bf16_baseline_op);
  MPI_Comm_free(&raw);
  return 0;
}
