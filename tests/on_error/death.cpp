// Options::on_error / POLYCOLL_ON_ERROR on NoOp, Threads and AnyCommunicator
// (docs/reliability.md, "Abort on error"): each scenario, named by argv[1],
// makes one failing call. Under abort it must not come back: check.py runs it
// in a child process and wants SIGABRT and the fatal line on stderr. Where the
// error is returned (the default, or errors the library does not return to the
// caller), it prints "RETURNED: <message>" and exits 0; any other outcome exits 1.
#include <polycoll/any_communicator.hpp>
#include <polycoll/backends/noop.hpp>
#include <polycoll/backends/threads.hpp>
#include "death_common.hpp"

#include <array>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

using death::aborting;
using death::returned;
using polycoll::AnyCommunicator;
using polycoll::DType;
using polycoll::Errc;
using polycoll::NoOp;
using polycoll::OnError;
using polycoll::Options;
using polycoll::ReduceOp;
using polycoll::Status;
using polycoll::Threads;

template <class T>
int returned(const polycoll::Result<T>& r) {
  if (r) {
    std::printf("UNEXPECTED: the call succeeded\n");
    return 1;
  }
  std::printf("RETURNED: %s\n", r.error().message.c_str());
  return 0;
}

// A seed all_reduce on a null buffer: the front end's argument check.
Status null_all_reduce(auto& comm) { return comm.all_reduce(0, 4, DType::F32, ReduceOp::Sum); }

// A rank's failed call, printed and swallowed: the rank carries on, so the
// error can end the process only through on_error at the call, not through
// Threads::run's own result.
void report(const Status& s) {
  if (!s) std::printf("RETURNED: %s\n", s.error().message.c_str());
}

// Two ranks: rank 0 makes `bad` while rank 1 waits in a barrier for it; both
// must stop. Where the error comes back, rank 0 joins the barrier and the
// run succeeds.
int two_ranks(Options o, std::function<Status(Threads&)> bad) {
  const Status s = Threads::run(2, [&](Threads& comm) {
    if (comm.rank() == 0) report(bad(comm));
    report(comm.barrier());
  }, o);
  if (!s) return returned(s);
  return 0;
}

const std::map<std::string_view, std::function<int()>> scenarios = {
    // NoOp: the front end's check, a backend error (group_end), an error found by sync().
    {"noop_check", [] { NoOp c(aborting()); return returned(null_all_reduce(c)); }},
    {"noop_group_end", [] { NoOp c(aborting()); return returned(c.group_end()); }},
    {"noop_sync",
     [] {
       NoOp c(aborting());
       std::array<float, 2> v{};
       if (auto s = c.recv(std::span(v), 0, 7); !s) return returned(s);  // posted, unmatched
       return returned(c.sync());
     }},
    // The default, and POLYCOLL_ON_ERROR=abort (check.py sets it) on the same call.
    {"noop_default", [] { NoOp c; return returned(null_all_reduce(c)); }},
    // Threads: rank 0's bad root while rank 1 waits in a barrier.
    {"threads_check",
     [] {
       return two_ranks(aborting(), [](Threads& c) { return c.broadcast(0x1000, 4, DType::F32, 5); });
     }},
    // A typed call's span check.
    {"threads_typed",
     [] {
       return two_ranks(aborting(), [](Threads& c) {
         std::array<float, 4> send{};
         std::array<float, 5> recv{};
         return c.all_gather(std::span(send), std::span(recv));
       });
     }},
    // An error the backend returns: the consistency check fails on both ranks.
    {"threads_backend",
     [] {
       Options o = aborting();
       o.check_consistency = true;
       const Status s = Threads::run(2, [](Threads& c) {
         std::vector<float> v(c.rank() == 0 ? 4 : 8);
         report(c.all_reduce(std::span(v), polycoll::sum));
       }, o);
       return s ? 0 : returned(s);
     }},
    // The factory's own error.
    {"threads_create", [] { return returned(Threads::create(0, aborting())); }},
    // A rank function that gives up (returns a failure of its own making):
    // run's result, or the aborted barrier of the rank waiting for it.
    {"threads_run_status",
     [] {
       return returned(Threads::run(2, [](Threads& c) -> Status {
         if (c.rank() == 0) return polycoll::fail(Errc::invalid_argument, "gave up");
         report(c.barrier());
         return {};
       }, aborting()));
     }},
    {"threads_default",
     [] { return two_ranks(Options{}, [](Threads& c) { return c.broadcast(0x1000, 4, DType::F32, 5); }); }},
    // A split world inherits the setting.
    {"threads_split",
     [] {
       const Status s = Threads::run(2, [](Threads& c) {
         auto sub = c.split(static_cast<std::uint32_t>(c.rank()), 0);
         if (!sub) return report(tl::unexpected(sub.error()));
         report(null_all_reduce(**sub));
       }, aborting());
       return s ? 0 : returned(s);
     }},
    // AnyCommunicator: the held backend's setting governs its typed surface
    // (checked in Communicator<AnyCommunicator>) and its seed surface (the
    // held backend's own checks).
    {"any_typed",
     [] {
       AnyCommunicator any{NoOp(aborting())};
       std::array<float, 4> send{};
       std::array<float, 5> recv{};
       return returned(any.all_gather(std::span(send), std::span(recv)));
     }},
    {"any_seed",
     [] {
       auto w = Threads::create(1, aborting());
       if (!w) return returned(w);
       AnyCommunicator any{std::move((*w)[0])};
       return returned(any.broadcast(0x1000, 4, DType::F32, 3));
     }},
    {"any_default",
     [] {
       AnyCommunicator any{NoOp()};
       std::array<float, 4> send{};
       std::array<float, 5> recv{};
       return returned(any.all_gather(std::span(send), std::span(recv)));
     }},
    // Errors that are not returned to a caller do not abort: a send dropped by
    // the destructor is logged. Exits 0 after printing what was logged.
    {"drop_logged",
     [] {
       std::array<float, 2> v{};
       {
         NoOp c(aborting());
         if (auto s = c.send(std::span<const float>(v), 0, 3); !s) return returned(s);
       }
       Options o = aborting();
       o.drop_timeout = std::chrono::milliseconds(20);
       auto w = Threads::create(2, o);
       if (!w) return returned(w);
       if (auto s = (*w)[0].send(std::span<const float>(v), 1, 3); !s) return returned(s);
       w->clear();  // rank 1 never receives: rank 0's destructor waits 20 ms, logs, drops
       std::printf("SURVIVED: the dropped operations were logged, nothing aborted\n");
       return 0;
     }},
    // An unrecognised POLYCOLL_ON_ERROR (check.py sets "bogus"): the factory
    // says so; NoOp, whose constructor cannot fail, logs it.
    {"env_unrecognised",
     [] {
       NoOp c;
       if (c.options().on_error != OnError::return_error) return 1;
       return returned(Threads::create(2));
     }},
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || !scenarios.contains(argv[1])) {
    std::fprintf(stderr, "usage: %s SCENARIO; scenarios:", argv[0]);
    for (const auto& [name, f] : scenarios) std::fprintf(stderr, " %.*s", static_cast<int>(name.size()), name.data());
    std::fprintf(stderr, "\n");
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // a line printed before an abort is not lost
  return scenarios.at(argv[1])();
}
