// Compile-cost probe (scripts/compile_cost): one raw MPI_Allreduce of floats.
#include <mpi.h>

int probe(MPI_Comm comm, float* a, int n) { return MPI_Allreduce(MPI_IN_PLACE, a, n, MPI_FLOAT, MPI_SUM, comm); }
