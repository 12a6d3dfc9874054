// polycoll-perf-threads: the nccl-tests compatible harness on Communicator<Threads>.
#include "threads_driver.hpp"

int main(int argc, char** argv) { return polycoll::perf::run<polycoll::perf::ThreadsDriver<false>>(argc, argv); }
