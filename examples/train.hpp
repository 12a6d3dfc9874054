#pragma once
// Data-parallel training of a linear model with bf16 gradients, generic over the backend.
//
// The model is linear regression, y ~ x . w, trained by full-batch gradient
// descent on the mean squared error. The samples are split evenly across
// ranks; every rank holds all the weights (fp32). One step, as a data-parallel
// trainer (PyTorch DDP, Horovod) does it:
//   1. forward: residuals r_i = x_i . w - y_i on this rank's samples;
//   2. backward, bucket by bucket (last bucket first, as backpropagation
//      produces the gradients of the last layer first): the local gradient
//      2/n sum_i r_i x_ij of the bucket's weights, rounded to bf16, and at once
//      the bucket's all_reduce(avg) is launched;
//   3. wait for every bucket (the Exchange's finish()), then w -= lr * g.
// The Exchange decides where the gradients live and how the buckets travel:
// HostExchange (below: host memory, all_reduce per bucket, sync() at the end;
// Threads and Mpi) and the Nccl one in train_nccl.cpp (device memory; each
// bucket's all_reduce waits for its upload by an event, not the host, so the
// host computes the next bucket while the previous one is reduced).
//
// The check: the weights agree bit for bit on every rank, and they are within
// `tolerance` of the least-squares solution, which reference() computes
// serially in double by the normal equations. Why that tolerance holds with
// bf16 gradients (8 significant bits, unit roundoff u = 2^-8): rounding is
// relative, so the averaged gradient keeps pointing downhill (each step
// contracts the error as long as lr * |H| * u << 1) and gradient descent goes
// on converging. What rounding does not remove is the error of each rank's
// *local* gradient, which at the optimum is not zero but of the order of the
// noise: with noise uniform in +-0.01 (sd 5.8e-3), features uniform in +-1
// (sd 0.58) and n = 384 samples per rank (8 ranks),
// |g_local| ~ 2 * 5.8e-3 * 0.58 / sqrt(n) ~ 3.4e-4. Rounding it (on this rank,
// and the result once more) moves the fixed point by about
// |H^-1| * u * |g_local| ~ 2.7 * 0.0039 * 3.4e-4 ~ 3.6e-6, where H = 2/n X^T X
// has eigenvalues in about [0.375, 1.04] (250 features over 3072 samples); the
// fp32 forward pass adds ~2e-7. NCCL's bf16 avg, rounding at every step of the
// ring, can be up to (world + 1) half-ulps off: 9x more at 8 ranks.
// `tolerance` = 1e-4 leaves 3x over that worst case (30x over Threads and Mpi,
// which reduce in float and round once; measured: 1e-6 at 4 ranks), while a
// wrong reduction misses by far more: sum instead of avg on 2+ ranks diverges
// (the test 'train_threads_wrong_op'), a bucket left unreduced makes the ranks
// disagree.

#include <polycoll/communicator.hpp>
#include <polycoll/numeric.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace train {

struct Params {
  std::size_t samples = 3072;  // divisible by 1, 2, 3, 4, 6, 8
  std::size_t features = 250;
  std::size_t bucket = 64;     // weights per all_reduce: 64, 64, 64, 58
  int steps = 40;
  float lr = 1.0f;
  double noise = 0.01;
  polycoll::ReduceOp op = polycoll::ReduceOp::Avg;  // Sum is wrong on 2+ ranks: the negative test uses it
};

/// Reads `--op avg|sum` from argv[first..] (nothing else is accepted).
inline polycoll::Result<Params> parse_args(int argc, char** argv, int first) {
  Params p;
  for (int i = first; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--op" && i + 1 < argc && (std::string_view(argv[i + 1]) == "avg" || std::string_view(argv[i + 1]) == "sum")) {
      p.op = std::string_view(argv[++i]) == "avg" ? polycoll::ReduceOp::Avg : polycoll::ReduceOp::Sum;
    } else {
      std::string m = "train: unknown argument '";
      m.append(a).append("' (accepted: --op avg|sum)");
      return polycoll::fail(polycoll::Errc::invalid_argument, std::move(m));
    }
  }
  return p;
}

/// Justified in the file comment.
inline constexpr double tolerance = 1e-4;

// A deterministic pseudo-random value in [-1, 1] for (i, j): the data need no
// storage or seed exchange, every rank makes its own samples.
inline double uniform(std::uint64_t i, std::uint64_t j) {
  std::uint64_t z = i * 0x9E3779B97F4A7C15ull + j * 0xD1B54A32D192ED03ull + 0x2545F4914F6CDD1Dull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

inline double true_weight(std::size_t j) { return std::sin(0.37 * static_cast<double>(j) + 0.1); }

/// Samples [first, first + n): features x (n rows of `features`) and targets y.
struct Shard {
  std::size_t n = 0;
  std::vector<float> x, y;
};

inline Shard make_shard(const Params& p, std::size_t first, std::size_t n) {
  Shard s;
  s.n = n;
  s.x.resize(n * p.features);
  s.y.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    double t = p.noise * uniform(first + i, ~0ull);
    for (std::size_t j = 0; j < p.features; ++j) {
      const double v = uniform(first + i, j);
      s.x[i * p.features + j] = static_cast<float>(v);
      t += static_cast<double>(static_cast<float>(v)) * true_weight(j);
    }
    s.y[i] = static_cast<float>(t);
  }
  return s;
}

/// The least-squares weights of all samples, serially in double (normal
/// equations, Cholesky): what training must converge to.
inline std::vector<double> reference(const Params& p) {
  const std::size_t d = p.features;
  const Shard all = make_shard(p, 0, p.samples);
  std::vector<double> a(d * d, 0.0), b(d, 0.0);
  for (std::size_t i = 0; i < all.n; ++i) {
    const float* x = &all.x[i * d];
    for (std::size_t j = 0; j < d; ++j) {
      b[j] += static_cast<double>(x[j]) * all.y[i];
      for (std::size_t k = 0; k <= j; ++k) a[j * d + k] += static_cast<double>(x[j]) * x[k];
    }
  }
  for (std::size_t j = 0; j < d; ++j) {  // a = L L^T, L in the lower triangle
    for (std::size_t k = 0; k < j; ++k) a[j * d + j] -= a[j * d + k] * a[j * d + k];
    a[j * d + j] = std::sqrt(a[j * d + j]);
    for (std::size_t i = j + 1; i < d; ++i) {
      for (std::size_t k = 0; k < j; ++k) a[i * d + j] -= a[i * d + k] * a[j * d + k];
      a[i * d + j] /= a[j * d + j];
    }
  }
  for (std::size_t j = 0; j < d; ++j) {  // L z = b
    for (std::size_t k = 0; k < j; ++k) b[j] -= a[j * d + k] * b[k];
    b[j] /= a[j * d + j];
  }
  for (std::size_t j = d; j-- > 0;) {  // L^T w = z
    for (std::size_t k = j + 1; k < d; ++k) b[j] -= a[k * d + j] * b[k];
    b[j] /= a[j * d + j];
  }
  return b;
}

/// Gradients in host memory, one all_reduce per bucket, sync() at the end:
/// the exchange for backends whose collectives take host buffers (Threads, Mpi).
template <class B>
class HostExchange {
 public:
  HostExchange(polycoll::Communicator<B>& comm, std::size_t n, polycoll::ReduceOp op)
      : comm_(comm), grad_(n), op_(op) {}
  /// Where backward() writes the local gradients (and finish() leaves the averages).
  std::span<polycoll::bf16> gradients() { return grad_; }
  /// Gradients [lo, hi) are final on this rank: reduce them.
  polycoll::Status launch(std::size_t lo, std::size_t hi) {
    return comm_.all_reduce(std::span<polycoll::bf16>(grad_).subspan(lo, hi - lo), op_);
  }
  /// Every bucket has been reduced.
  polycoll::Status finish() { return comm_.sync(); }
  /// True on every rank when `w` is bitwise the same on every rank.
  polycoll::Result<bool> agree(std::span<const float> w) {
    std::vector<float> all(w.size() * comm_.world_size());
    if (auto s = comm_.all_gather(w, std::span<float>(all)); !s) return tl::unexpected(s.error());
    if (auto s = comm_.sync(); !s) return tl::unexpected(s.error());
    for (std::size_t r = 0; r < comm_.world_size(); ++r) {
      if (std::memcmp(all.data() + r * w.size(), w.data(), w.size_bytes()) != 0) return false;
    }
    return true;
  }

 private:
  polycoll::Communicator<B>& comm_;
  std::vector<polycoll::bf16> grad_;
  polycoll::ReduceOp op_;
};

/// What training produced on this rank.
struct Outcome {
  std::vector<float> w;
  bool agree = false;       // the weights are bitwise equal on every rank
  double compute_s = 0.0;   // forward + backward, with the launches of the buckets
  double wait_s = 0.0;      // in finish(): communication not hidden behind the compute
};

/// Trains on this rank's shard; `ex` moves the gradients (see HostExchange).
template <class B, class Exchange>
polycoll::Result<Outcome> run(polycoll::Communicator<B>& comm, Exchange& ex, const Params& p) {
  using clock = std::chrono::steady_clock;
  const std::size_t world = comm.world_size(), rank = comm.rank(), d = p.features;
  if (p.samples % world != 0 || p.bucket == 0 || d == 0) {
    return polycoll::fail(polycoll::Errc::invalid_argument,
                          "train: samples must be divisible by the world size, bucket and features positive");
  }
  const std::size_t n = p.samples / world;
  const Shard shard = make_shard(p, rank * n, n);
  Outcome out;
  out.w.assign(d, 0.0f);
  std::vector<float> residual(n), acc(p.bucket);
  const std::span<polycoll::bf16> grad = ex.gradients();
  const std::size_t buckets = (d + p.bucket - 1) / p.bucket;
  for (int step = 0; step < p.steps; ++step) {
    const auto t0 = clock::now();
    for (std::size_t i = 0; i < n; ++i) {
      float dot = 0.0f;
      for (std::size_t j = 0; j < d; ++j) dot += shard.x[i * d + j] * out.w[j];
      residual[i] = dot - shard.y[i];
    }
    for (std::size_t b = buckets; b-- > 0;) {
      const std::size_t lo = b * p.bucket, hi = std::min(d, lo + p.bucket);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t j = lo; j < hi; ++j) acc[j - lo] += residual[i] * shard.x[i * d + j];
      }
      for (std::size_t j = lo; j < hi; ++j) grad[j] = polycoll::bf16(acc[j - lo] * (2.0f / static_cast<float>(n)));
      if (auto s = ex.launch(lo, hi); !s) return tl::unexpected(s.error());
    }
    const auto t1 = clock::now();
    if (auto s = ex.finish(); !s) return tl::unexpected(s.error());
    const auto t2 = clock::now();
    for (std::size_t j = 0; j < d; ++j) out.w[j] -= p.lr * static_cast<float>(grad[j]);
    out.compute_s += std::chrono::duration<double>(t1 - t0).count();
    out.wait_s += std::chrono::duration<double>(t2 - t1).count();
  }
  auto same = ex.agree(out.w);
  if (!same) return tl::unexpected(same.error());
  out.agree = *same;
  return out;
}

/// Compares with the least-squares weights; prints one line on rank 0.
inline bool check(const Outcome& got, const std::vector<double>& want, const Params& p, std::size_t rank,
                  std::size_t world, const char* backend) {
  double err = 0.0;
  for (std::size_t j = 0; j < want.size(); ++j) {
    const double e = std::abs(static_cast<double>(got.w[j]) - want[j]);
    err = std::isnan(e) ? INFINITY : std::max(err, e);
  }
  const bool ok = got.agree && err <= tolerance;
  if (rank == 0) {
    const std::string_view op = polycoll::name(p.op);
    std::printf("train %zu samples x %zu features, %d steps, bf16 buckets of %zu, %.*s on %zu rank(s) [%s]: "
                "max |w - w_lsq| = %.2e (tolerance %.0e), ranks %s; compute and launches %.3f s, waiting in finish() %.3f s: %s\n",
                p.samples, p.features, p.steps, p.bucket, static_cast<int>(op.size()), op.data(), world, backend,
                err, tolerance, got.agree ? "agree" : "DISAGREE", got.compute_s, got.wait_s, ok ? "ok" : "WRONG");
  }
  return ok;
}

}  // namespace train
