// examples/tutorial/stats.hpp: the algorithm, written once for every backend.
#pragma once
#include <polycoll/communicator.hpp>

#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

struct Stats {
  double count, mean, stddev;
};

// Every rank holds a slice of the data; every rank gets the statistics of all of it.
template <class B>
polycoll::Result<Stats> global_stats(polycoll::Communicator<B>& comm, std::span<const double> mine) {
  double acc[3] = {static_cast<double>(mine.size()), 0.0, 0.0};  // count, sum, sum of squares
  for (double x : mine) {
    acc[1] += x;
    acc[2] += x * x;
  }
  if (auto s = comm.all_reduce(std::span<double>(acc), polycoll::sum); !s) return tl::unexpected(s.error());
  if (auto s = comm.sync(); !s) return tl::unexpected(s.error());  // outputs are valid after sync()
  const double mean = acc[1] / acc[0];
  return Stats{acc[0], mean, std::sqrt(acc[2] / acc[0] - mean * mean)};
}

// Rank r's slice of the numbers 0, 1, 2, ...: [r * n, (r + 1) * n).
inline std::vector<double> slice(std::size_t rank, std::size_t n) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<double>(rank * n + i);
  return v;
}

// The mean of 0 .. count-1 is (count - 1) / 2, exactly (these sums are exact in double).
inline bool plausible(const Stats& s) { return s.mean == (s.count - 1) / 2; }
