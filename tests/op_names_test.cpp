// The op constants next to the standard library's: with
// POLYCOLL_NO_FLAT_OP_NAMES, a TU that says `using namespace std;` and
// `using namespace polycoll;` calls std::min / std::max unqualified and
// passes the ops as op::min / op::max (docs/design.md, "Op names").
// Compiling is half the test (without the macro, min(a, b) below is
// ambiguous); running checks that the ops reduce as their names say.
#define POLYCOLL_NO_FLAT_OP_NAMES
#include <polycoll/threads.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>

using namespace std;       // NOLINT(google-build-using-namespace): the point of the test
using namespace polycoll;  // NOLINT(google-build-using-namespace)

int main() {
  // std::min and std::max, unqualified, with both namespaces in scope.
  if (min(3, 5) != 3 || max(3, 5) != 5 || min({4, 2, 8}) != 2) return 1;
  atomic<int> wrong{0};
  const Status s = Threads::run(3, [&](Threads& comm) -> Status {
    const auto r = static_cast<float>(comm.rank());
    array<float, 2> lo{r, -r}, hi{r, -r}, total{r, 1};
    if (auto st = comm.all_reduce(span<float>(lo), op::min); !st) return st;
    if (auto st = comm.all_reduce(span<float>(hi), op::max); !st) return st;
    if (auto st = comm.all_reduce(span<float>(total), op::sum); !st) return st;
    auto m = comm.all_reduce_value(comm.rank() + 1, op::prod);
    if (!m) return tl::unexpected(m.error());
    const bool ok = lo == array<float, 2>{0, -2} && hi == array<float, 2>{2, 0} &&
                    total == array<float, 2>{3, 3} && *m == 6 && min(*m, size_t{7}) == 6;
    if (!ok) wrong.fetch_add(1);
    return {};
  });
  if (!s) {
    fprintf(stderr, "op_names: %s\n", s.error().message.c_str());
    return 1;
  }
  if (wrong.load() != 0) {
    fprintf(stderr, "op_names: %d rank(s) got a wrong reduction\n", wrong.load());
    return 1;
  }
  return 0;
}
