// The conformance suite on Nccl: world sizes 1 .. every visible GPU (init_all),
// device buffers, one thread per rank. Tags are not matched (NCCL has none).
#include "fixture.hpp"

#define POLYCOLL_FIXTURE polycoll::test::NcclFixture
#define POLYCOLL_TAG "[nccl]"
#include "../conformance.hpp"

// The suite uses the fixture's Avg bound (NCCL rounds narrow floats step by step).
static_assert(polycoll::test::conformance::states_avg_tolerance<polycoll::test::NcclFixture, polycoll::f16>);
