#pragma once
/// @file backends/mpi/environment.hpp
/// MPI's lifetime for the Mpi backend: `polycoll::mpi::Environment` (RAII
/// MPI_Init_thread / MPI_Finalize) and `polycoll::mpi::thread_level()`.

#include <optional>

#include <mpi.h>

#include <polycoll/backends/mpi/error.hpp>
#include <polycoll/backends/mpi/process.hpp>
#include <polycoll/detail/text.hpp>
#include <polycoll/error.hpp>

namespace polycoll {

namespace mpi {

/// The thread level MPI provides (MPI_THREAD_SINGLE .. MPI_THREAD_MULTIPLE),
/// or -1 when MPI is not initialised.
[[nodiscard]] inline int thread_level() noexcept {
  if (!detail::mpi::mpi_usable()) return -1;
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  return provided;
}

/// RAII initialisation of MPI. Asks MPI_Init_thread for MPI_THREAD_MULTIPLE.
/// When MPI is already initialised (by the user, Boost.MPI or a test main) it
/// owns nothing and its destructor does nothing; otherwise the destructor
/// frees polycoll's cached MPI_Ops and calls MPI_Finalize. Never throws:
/// check `ok()` / `status()`.
class Environment {
 public:
  /// Initialises MPI without command-line arguments.
  Environment() noexcept { init(nullptr, nullptr); }
  /// Initialises MPI with main's arguments (MPI may remove its own).
  Environment(int& argc, char**& argv) noexcept { init(&argc, &argv); }
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
  ~Environment() {
    if (!owns_) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin != 0) return;
    detail::mpi::release_ops();
    MPI_Finalize();
  }

  /// True when this object initialised MPI (and will finalise it).
  [[nodiscard]] bool owns() const noexcept { return owns_; }
  /// The thread level MPI provides.
  [[nodiscard]] int provided() const noexcept { return provided_; }
  /// True when MPI is usable.
  [[nodiscard]] bool ok() const noexcept { return !error_; }
  /// Success, or why MPI could not be initialised.
  [[nodiscard]] Status status() const {
    if (error_) return tl::unexpected(*error_);
    return {};
  }

 private:
  void init(int* argc, char*** argv) noexcept {
    try {
      int init = 0, fin = 0;
      MPI_Initialized(&init);
      MPI_Finalized(&fin);
      if (fin != 0) {
        error_ = Error{Errc::not_initialized, "mpi::Environment [mpi]: MPI has already been finalized", 0};
        return;
      }
      if (init == 0) {
        const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided_);
        if (rc != MPI_SUCCESS) {
          error_ = Error{Errc::backend_failure,
                         detail::cat("mpi::Environment [mpi]: MPI_Init_thread failed: ", detail::mpi::error_text(rc)),
                         rc};
          return;
        }
        owns_ = true;
      } else {
        MPI_Query_thread(&provided_);
      }
      if (const int rc = detail::mpi::install_hook(); rc != MPI_SUCCESS) {
        error_ = Error{Errc::backend_failure,
                       detail::cat("mpi::Environment [mpi]: cannot attach the finalize hook: ",
                                   detail::mpi::error_text(rc)),
                       rc};
      }
    } catch (...) {
      error_ = Error{Errc::backend_failure, {}, 0};  // only a message allocation can throw
    }
  }

  bool owns_ = false;
  int provided_ = MPI_THREAD_SINGLE;
  std::optional<Error> error_;
};

}  // namespace mpi

}  // namespace polycoll
