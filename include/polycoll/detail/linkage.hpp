#pragma once
/// @file detail/linkage.hpp
/// Where polycoll's non-template functions are defined (docs/design.md, "Two
/// build modes"). A function that libpolycoll holds is declared in its header
/// and defined in a block that the header shows only
/// - with POLYCOLL_HEADER_ONLY, where POLYCOLL_DETAIL_LIB_INLINE is `inline`
///   and every TU compiles it, as any header-only function;
/// - to the one source file of libpolycoll that defines it (it defines the
///   block's POLYCOLL_DETAIL_DEFINE_* macro), where the macro is empty.
/// Other TUs see the declaration only, so they compile no code for it and call
/// the library's definition.

/// @cond POLYCOLL_LIBRARY_INTERNALS
#if defined(POLYCOLL_HEADER_ONLY)
#define POLYCOLL_DETAIL_LIB_INLINE inline
#else
#define POLYCOLL_DETAIL_LIB_INLINE
#endif
/// @endcond
