#pragma once
// A distributed 2-D heat equation (Jacobi iteration), generic over the backend.
//
// The global grid has `ny` rows of `nx` cells; row 0 is held at 1.0 (a hot
// edge), the other edges at 0.0. Rows are split evenly across ranks; each
// rank keeps one halo row above and below its block. Every iteration:
//   1. halo exchange with the neighbours by send/recv (tags 1 = downwards, 2 = upwards),
//   2. the Jacobi update of the interior,
//   3. the global residual (sum of squared updates) by all_reduce.
// At the end the blocks are gathered (all_gather) and compared, bit for bit,
// with the serial computation: the update of a cell does the same arithmetic
// whichever rank owns it.

#include <polycoll/communicator.hpp>

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace heat {

struct Params {
  std::size_t nx = 64;
  std::size_t ny = 48;  // divisible by 1, 2, 3, 4, 6, 8
  int iterations = 300;
};

/// Reads `[nx ny iterations]` from argv[first..] (all three, or none for the
/// defaults). Anything but positive integers (iterations: non-negative) is an Error.
inline polycoll::Result<Params> parse_args(int argc, char** argv, int first) {
  Params p;
  if (argc <= first) return p;
  if (argc - first != 3) return polycoll::fail(polycoll::Errc::invalid_argument, "heat: expected nx ny iterations");
  auto number = [](std::string_view text, std::size_t min, std::size_t& out) {
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc{} && end == text.data() + text.size() && out >= min && out <= (1u << 20);
  };
  std::size_t it = 0;
  if (!number(argv[first], 1, p.nx) || !number(argv[first + 1], 1, p.ny) || !number(argv[first + 2], 0, it)) {
    std::string m = "heat: nx, ny (1..2^20) and iterations (0..2^20) must be integers, got";
    for (int i = first; i < argc; ++i) m.append(" '").append(argv[i]).append("'");
    return polycoll::fail(polycoll::Errc::invalid_argument, std::move(m));
  }
  p.iterations = static_cast<int>(it);
  return p;
}

// One Jacobi sweep over rows [1, rows] of `u` (rows+2 rows of nx), returns the
// sum of squared updates. `top_fixed` / `bottom_fixed`: the first / last owned
// row is a global boundary row and is not updated.
inline double sweep(const std::vector<double>& u, std::vector<double>& next, std::size_t nx, std::size_t rows,
                    bool top_fixed, bool bottom_fixed) {
  double residual = 0.0;
  for (std::size_t r = 1; r <= rows; ++r) {
    const bool fixed_row = (r == 1 && top_fixed) || (r == rows && bottom_fixed);
    for (std::size_t c = 0; c < nx; ++c) {
      const std::size_t i = r * nx + c;
      if (fixed_row || c == 0 || c == nx - 1) {
        next[i] = u[i];
        continue;
      }
      next[i] = 0.25 * (u[i - nx] + u[i + nx] + u[i - 1] + u[i + 1]);
      const double d = next[i] - u[i];
      residual += d * d;
    }
  }
  return residual;
}

inline void initial(std::vector<double>& u, std::size_t nx, std::size_t first_global_row, std::size_t rows) {
  for (std::size_t r = 1; r <= rows; ++r) {
    for (std::size_t c = 0; c < nx; ++c) u[r * nx + c] = (first_global_row + r - 1 == 0) ? 1.0 : 0.0;
  }
}

/// The serial reference: the whole grid on one rank, no communication.
inline std::pair<std::vector<double>, double> serial(const Params& p) {
  std::vector<double> u((p.ny + 2) * p.nx, 0.0), next = u;
  initial(u, p.nx, 0, p.ny);
  double residual = 0.0;
  for (int it = 0; it < p.iterations; ++it) {
    residual = sweep(u, next, p.nx, p.ny, true, true);
    std::swap(u, next);
  }
  return {std::vector<double>(u.begin() + static_cast<std::ptrdiff_t>(p.nx), u.end() - static_cast<std::ptrdiff_t>(p.nx)),
          residual};
}

/// The distributed solver. Returns the whole grid (gathered on every rank) and the final residual.
template <class B>
polycoll::Result<std::pair<std::vector<double>, double>> solve(polycoll::Communicator<B>& comm, const Params& p) {
  using polycoll::Status;
  const std::size_t world = comm.world_size(), rank = comm.rank();
  if (p.ny % world != 0) {
    return polycoll::fail(polycoll::Errc::invalid_argument, "heat: ny must be divisible by the world size");
  }
  const std::size_t rows = p.ny / world, nx = p.nx;
  std::vector<double> u((rows + 2) * nx, 0.0), next = u;
  initial(u, nx, rank * rows, rows);
  const bool top = rank == 0, bottom = rank + 1 == world;
  double residual = 0.0;
  auto row = [&](std::vector<double>& v, std::size_t r) { return std::span<double>(v.data() + r * nx, nx); };
  for (int it = 0; it < p.iterations; ++it) {
    // Halo exchange: everyone posts both sends, then both receives, then syncs.
    if (!top) {
      if (auto s = comm.send(row(u, 1), rank - 1, 2); !s) return tl::unexpected(s.error());
      if (auto s = comm.recv(row(u, 0), rank - 1, 1); !s) return tl::unexpected(s.error());
    }
    if (!bottom) {
      if (auto s = comm.send(row(u, rows), rank + 1, 1); !s) return tl::unexpected(s.error());
      if (auto s = comm.recv(row(u, rows + 1), rank + 1, 2); !s) return tl::unexpected(s.error());
    }
    if (auto s = comm.sync(); !s) return tl::unexpected(s.error());
    double local = sweep(u, next, nx, rows, top, bottom);
    std::swap(u, next);
    if (auto s = comm.all_reduce(std::span<double>(&local, 1), polycoll::sum); !s) return tl::unexpected(s.error());
    if (auto s = comm.sync(); !s) return tl::unexpected(s.error());
    residual = local;
  }
  std::vector<double> grid(p.ny * nx);
  const std::span<const double> mine(u.data() + nx, rows * nx);
  if (auto s = comm.all_gather(mine, std::span<double>(grid)); !s) return tl::unexpected(s.error());
  if (auto s = comm.sync(); !s) return tl::unexpected(s.error());
  return std::pair{std::move(grid), residual};
}

/// Compares a distributed result with the serial one; prints a line on rank 0.
inline bool check(const std::pair<std::vector<double>, double>& got, const Params& p, std::size_t rank,
                  std::size_t world, const char* backend) {
  const auto want = serial(p);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < want.first.size(); ++i) wrong += got.first[i] == want.first[i] ? 0 : 1;
  const bool residual_ok = std::abs(got.second - want.second) <= 1e-12 * std::max(1.0, want.second);
  if (rank == 0) {
    std::printf("heat %zux%zu, %d iterations on %zu rank(s) [%s]: residual %.6e (serial %.6e), %zu cell(s) differ: %s\n",
                p.nx, p.ny, p.iterations, world, backend, got.second, want.second, wrong,
                wrong == 0 && residual_ok ? "ok" : "WRONG");
  }
  return wrong == 0 && residual_ok;
}

}  // namespace heat
