#pragma once
// The one entry into Catch2's session for the suites' main() functions
// (tests/main.cpp, tests/nccl/main.cpp). Catch2 2.x declares its Session only
// in the TU that holds its implementation, so that TU (catch_impl.cpp, built
// once) defines this and the mains include no Catch2 at all.

namespace polycoll::test {

/// Runs the Catch2 session on argv. The report goes to `report_file` when it is
/// not null (an MPI rank other than 0 keeps its report private). Returns what
/// Catch2's Session::run returns (the failed assertions, at most 255); when argv
/// does not parse, sets *bad_command_line and returns Catch2's error code.
int run_catch(int argc, char** argv, const char* report_file, bool* bad_command_line);

}  // namespace polycoll::test
