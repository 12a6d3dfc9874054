#pragma once
/// @file nccl.hpp
/// The core and the Nccl backend only. Needs a polycoll configured with NCCL
/// and the CUDA and NCCL include path (pkg-config polycoll and CMake
/// polycoll::polycoll carry it); either missing is a compile error that says
/// so, not a backend silently left out.

#include <polycoll/detail/core.hpp>

#if !POLYCOLL_HAS_NCCL
#error "polycoll: <polycoll/nccl.hpp> needs polycoll configured with NCCL (POLYCOLL_HAS_NCCL is 0 in <polycoll/config.hpp>)"
#elif defined(__has_include)
#if !__has_include(<nccl.h>) || !__has_include(<cuda_runtime.h>)
#error "polycoll: configured with NCCL (POLYCOLL_HAS_NCCL), but <nccl.h> or <cuda_runtime.h> is not on the include path: compile with CUDA's and NCCL's flags (pkg-config polycoll and CMake polycoll::polycoll carry them), or include the header of another backend instead of the NCCL-enabled ones"
#endif
#endif

#include <polycoll/backends/nccl.hpp>
