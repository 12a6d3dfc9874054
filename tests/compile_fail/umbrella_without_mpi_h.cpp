// polycoll configured with MPI, compiled without MPI's include path: the
// umbrella must stop with an #error naming <mpi.h>, not drop the backend.
// The control includes only the Threads header, which needs no MPI.
#ifdef POLYCOLL_CONTROL
#include <polycoll/threads.hpp>
#else
#include <polycoll/polycoll.hpp>
#endif

int main() { return 0; }
