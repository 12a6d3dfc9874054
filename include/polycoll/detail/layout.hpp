#pragma once
// Per-rank blocks of the v-collectives (all_gather_v, all_to_all_v): counts
// and displacements in elements, one of each per rank. The front end checks a
// layout once (sizes, overflow, overlap) and hands backends a VLayout. Internal.

#include <cstddef>
#include <span>

namespace polycoll::detail {

/// `counts[q]` elements at element offset `displ(q)`, for q < n. Without
/// displacements the blocks are packed in rank order (exclusive prefix sums of
/// the counts), as torch.distributed's split sizes are.
struct VLayout {
  const std::size_t* counts = nullptr;
  const std::size_t* displs = nullptr;  // nullptr: packed
  std::size_t n = 0;

  [[nodiscard]] std::size_t count(std::size_t q) const noexcept { return counts[q]; }
  /// O(1) with explicit displacements, O(q) when packed.
  [[nodiscard]] std::size_t displ(std::size_t q) const noexcept {
    if (displs) return displs[q];
    std::size_t d = 0;
    for (std::size_t i = 0; i < q; ++i) d += counts[i];
    return d;
  }
  /// Calls f(q, count, displacement) for every rank in order, in O(n).
  template <class F>
  void each(F&& f) const {
    std::size_t run = 0;
    for (std::size_t q = 0; q < n; ++q) {
      f(q, counts[q], displs ? displs[q] : run);
      run += counts[q];
    }
  }
  /// Sum of the counts.
  [[nodiscard]] std::size_t total() const noexcept {
    std::size_t t = 0;
    for (std::size_t q = 0; q < n; ++q) t += counts[q];
    return t;
  }
};

/// Why a layout is invalid, or nullptr; `extent` gets max(displ + count).
/// Checks: one count per rank, displacements absent or one per rank, no
/// size_t overflow, and no two non-empty blocks overlapping (linear when the
/// displacements ascend in rank order, the usual case; pairwise otherwise).
inline const char* check_layout(std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                                std::size_t world, std::size_t& extent, std::size_t& bad_rank) noexcept {
  extent = 0;
  bad_rank = 0;
  if (counts.size() != world) return "has not one count per rank";
  if (!displs.empty() && displs.size() != world) return "has not one displacement per rank (or none: packed)";
  bool ascending = true;
  std::size_t run = 0, prev_end = 0;
  for (std::size_t q = 0; q < world; ++q) {
    const std::size_t d = displs.empty() ? run : displs[q];
    std::size_t end = 0;
    if (__builtin_add_overflow(d, counts[q], &end) || (displs.empty() && __builtin_add_overflow(run, counts[q], &run))) {
      bad_rank = q;
      return "overflows size_t";
    }
    if (counts[q] != 0) {
      if (d < prev_end) ascending = false;
      prev_end = end;
    }
    if (end > extent) extent = end;
  }
  if (ascending || displs.empty()) return nullptr;
  for (std::size_t a = 0; a < world; ++a) {
    if (counts[a] == 0) continue;
    for (std::size_t b = a + 1; b < world; ++b) {
      if (counts[b] == 0) continue;
      if (displs[a] < displs[b] + counts[b] && displs[b] < displs[a] + counts[a]) {
        bad_rank = b;
        return "has overlapping blocks";
      }
    }
  }
  return nullptr;
}

}  // namespace polycoll::detail
