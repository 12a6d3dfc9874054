// Compile-cost probe (scripts/compile_cost): the floor, a TU with <vector> only.
#include <vector>

int probe(std::vector<float>& a) { return static_cast<int>(a.size()); }
