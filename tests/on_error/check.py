#!/usr/bin/env python3
"""Death-test check for Options::on_error (docs/reliability.md, "Abort on error").

Runs COMMAND in a child process, bounded by --timeout so that a rank left
waiting fails the test instead of hanging it, and checks how it ended:

  --expect abort     killed by SIGABRT (--mpi: the launcher exits nonzero, since
                     MPI_Abort ends the job with the code it was given), nothing
                     printed "RETURNED", and a stderr line starting with the
                     fatal prefix that contains every --text
  --expect returned  exit status 0, no fatal line, and every --text somewhere in
                     stdout or stderr
  --expect skip      exit status 77 (meson's SKIP) is passed through; anything
                     else is checked as --expect abort

usage: check.py --expect abort|returned|skip [--text T]... [--env K=V]... [--timeout S] [--mpi] -- COMMAND...
"""
import argparse
import os
import signal
import subprocess
import sys

PREFIX = "polycoll: fatal error (on_error=abort): "


def main() -> int:
    sep = sys.argv.index("--")
    p = argparse.ArgumentParser()
    p.add_argument("--expect", choices=["abort", "returned", "skip"], required=True)
    p.add_argument("--text", action="append", default=[])
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--mpi", action="store_true")
    args = p.parse_args(sys.argv[1:sep])
    command = sys.argv[sep + 1:]
    env = dict(os.environ)
    env.pop("POLYCOLL_ON_ERROR", None)  # only what the test asks for
    for kv in args.env:
        k, v = kv.split("=", 1)
        env[k] = v
    try:
        # A new session: on timeout the whole process group (a launcher and
        # its ranks) is killed, not only the launcher.
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                 start_new_session=True)
        out, err = child.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, err = child.communicate()
        print(f"FAIL: still running after {args.timeout} s (a rank was left waiting)\nstdout:\n{out}\nstderr:\n{err}")
        return 1
    rc = child.returncode
    report = f"exit status {rc}\nstdout:\n{out}\nstderr:\n{err}"
    fatal = [line for line in err.splitlines() if PREFIX in line]
    if args.expect == "skip" and rc == 77:
        print(f"SKIP\n{report}")
        return 77
    if args.expect in ("abort", "skip"):
        if args.mpi:
            if rc == 0:
                print(f"FAIL: the job exited 0, expected MPI_Abort\n{report}")
                return 1
        elif rc != -signal.SIGABRT:
            print(f"FAIL: expected death by SIGABRT (status {-signal.SIGABRT})\n{report}")
            return 1
        if "RETURNED" in out:
            print(f"FAIL: the error was returned to the caller\n{report}")
            return 1
        if not fatal:
            print(f"FAIL: no line with '{PREFIX}' on stderr\n{report}")
            return 1
        missing = [t for t in args.text if not any(t in line for line in fatal)]
        if missing:
            print(f"FAIL: the fatal line lacks {missing}\n{report}")
            return 1
    else:
        if rc != 0:
            print(f"FAIL: expected exit status 0\n{report}")
            return 1
        if fatal:
            print(f"FAIL: printed a fatal line, but the error should have been returned\n{report}")
            return 1
        missing = [t for t in args.text if t not in out and t not in err]
        if missing:
            print(f"FAIL: output lacks {missing}\n{report}")
            return 1
    print(f"ok ({args.expect})\n{report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
