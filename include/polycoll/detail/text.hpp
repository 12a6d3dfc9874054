#pragma once
// cat(): builds a message from pieces by appending, never by `"..." + string`,
// whose libstdc++ 12 expansion trips -Werror=restrict at -O3 (GCC PR 105651).
// Internal.

#include <concepts>
#include <string>
#include <string_view>
#include <type_traits>

namespace polycoll::detail {

inline void append(std::string& s, std::string_view v) { s.append(v.data(), v.size()); }
inline void append(std::string& s, char c) { s.push_back(c); }
template <std::integral I>
  requires(!std::same_as<I, char> && !std::same_as<I, bool>)
void append(std::string& s, I v) {
  s += std::to_string(v);
}

/// Concatenates strings, string_views, C strings, chars and integers.
template <class... A>
std::string cat(const A&... pieces) {
  std::string s;
  (append(s, pieces), ...);
  return s;
}

}  // namespace polycoll::detail
