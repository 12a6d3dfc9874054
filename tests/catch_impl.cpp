// Catch2's implementation, compiled once (the catch_impl library) for the
// runners of every suite: tests/main.cpp and tests/nccl/main.cpp call
// run_catch, so each of them costs neither a copy of Catch2 nor its header.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_run.hpp"

int polycoll::test::run_catch(int argc, char** argv, const char* report_file, bool* bad_command_line) {
  Catch::Session session;
  *bad_command_line = false;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) {
    *bad_command_line = true;
    return rc;
  }
  if (report_file != nullptr) session.configData().outputFilename = report_file;
  return session.run();
}
