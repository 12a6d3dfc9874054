#pragma once
/// @file detail/std_parts.hpp
/// What the headers that every TU parses take from `<algorithm>`, `<chrono>`,
/// `<ranges>` and `<thread>`: std::min, std::max, std::copy, std::fill and
/// std::equal; the clocks, durations and time points; the range concepts and
/// std::ranges::data/size; std::thread, std::this_thread::yield and
/// sleep_for. Nothing else of those four headers.
///
/// On libstdc++ they come from the internal headers that hold exactly those,
/// which leaves out the calendar and formatting part of `<chrono>`, the views
/// of `<ranges>`, the ranges and parallel algorithms of `<algorithm>` and
/// `<thread>`'s `<stop_token>` and `<semaphore>`: together about a sixth of a
/// compiled-mode TU's compile time (docs/benchmarks.md, "The standard headers
/// a TU parses"). (GCC 12's `<sstream>` and `<bits/stl_algo.h>` are parsed
/// anyway, through `<complex>` and tl::expected's `<functional>`, so a
/// forbidden `std::sort` still compiles there: the rule is kept by review.) Any other standard library, and a
/// libstdc++ that lacks one of those headers, gets the four standard headers.
/// A user TU that wants more of them includes them itself, as it must anyway.
/// The definitions blocks (parsed by libpolycoll and header-only TUs) include
/// the standard headers they use themselves.

#include <version>  // defines __GLIBCXX__ when the library is libstdc++

#if defined(__GLIBCXX__) && defined(__has_include)
#if __has_include(<bits/stl_algobase.h>) && __has_include(<bits/chrono.h>) && \
    __has_include(<bits/std_thread.h>) && __has_include(<bits/this_thread_sleep.h>)
#define POLYCOLL_DETAIL_STD_PARTS 1
#endif
#endif

#if defined(POLYCOLL_DETAIL_STD_PARTS)
#include <bits/stl_algobase.h>
#include <bits/chrono.h>
// libstdc++'s <span> defines the range concepts (<bits/ranges_base.h>,
// which is not self-contained); every header that includes this one needs
// <span> anyway.
#include <span>
#include <bits/std_thread.h>
#include <bits/this_thread_sleep.h>
#undef POLYCOLL_DETAIL_STD_PARTS
#else
#include <algorithm>
#include <chrono>
#include <ranges>
#include <thread>
#endif
