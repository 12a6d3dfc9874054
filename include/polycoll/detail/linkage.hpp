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

// The member templates of backend class B that the front end's typed calls
// reach, for one valid (dtype, op) pair (_PAIR) or one dtype (_DTYPE), as
// `Prefix template` explicit instantiations: `extern` declares them in B's
// header, empty defines them in the libpolycoll source that holds B.
// Expanded inside namespace polycoll.
#define POLYCOLL_DETAIL_BACKEND_PAIR(Prefix, B, D, Op)                                                           \
  Prefix template Status B::all_reduce_impl(dtype_tag<DType::D>, op_tag<ReduceOp::Op>, dtype_tag<DType::D>::type*, \
                                            std::size_t);                                                         \
  Prefix template Status B::reduce_scatter_impl(dtype_tag<DType::D>, op_tag<ReduceOp::Op>,                         \
                                                const dtype_tag<DType::D>::type*, dtype_tag<DType::D>::type*,      \
                                                std::size_t);                                                     \
  Prefix template Status B::reduce_impl(dtype_tag<DType::D>, op_tag<ReduceOp::Op>, const dtype_tag<DType::D>::type*, \
                                        dtype_tag<DType::D>::type*, std::size_t, std::size_t);
#define POLYCOLL_DETAIL_BACKEND_DTYPE(Prefix, B, D)                                                               \
  Prefix template Status B::broadcast_impl(dtype_tag<DType::D>, dtype_tag<DType::D>::type*, std::size_t,           \
                                           std::size_t);                                                          \
  Prefix template Status B::all_gather_impl(dtype_tag<DType::D>, const dtype_tag<DType::D>::type*,                 \
                                            dtype_tag<DType::D>::type*, std::size_t);                             \
  Prefix template Status B::gather_impl(dtype_tag<DType::D>, const dtype_tag<DType::D>::type*,                     \
                                        dtype_tag<DType::D>::type*, std::size_t, std::size_t);                    \
  Prefix template Status B::scatter_impl(dtype_tag<DType::D>, const dtype_tag<DType::D>::type*,                    \
                                         dtype_tag<DType::D>::type*, std::size_t, std::size_t);                   \
  Prefix template Status B::all_to_all_impl(dtype_tag<DType::D>, const dtype_tag<DType::D>::type*,                 \
                                            dtype_tag<DType::D>::type*, std::size_t);                             \
  Prefix template Status B::all_gather_v_impl(dtype_tag<DType::D>, const dtype_tag<DType::D>::type*, std::size_t,  \
                                              dtype_tag<DType::D>::type*, const detail::VLayout&);                \
  Prefix template Status B::all_to_all_v_impl(dtype_tag<DType::D>, const dtype_tag<DType::D>::type*,               \
                                              const detail::VLayout&, dtype_tag<DType::D>::type*,                 \
                                              const detail::VLayout&);                                            \
  Prefix template Status B::send_impl(dtype_tag<DType::D>, const dtype_tag<DType::D>::type*, std::size_t,          \
                                      std::size_t, std::uint32_t);                                                \
  Prefix template Status B::recv_impl(dtype_tag<DType::D>, dtype_tag<DType::D>::type*, std::size_t, std::size_t,   \
                                      std::uint32_t);
/// @endcond
