#pragma once
// Statistics the ratio benchmarks share.

#include <algorithm>
#include <vector>

namespace polycoll::bench {

/// The median of `v` (the upper one of an even count); 0 for none.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace polycoll::bench
