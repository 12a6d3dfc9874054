#!/usr/bin/env python3
"""Every Error the front end returns passes Options::on_error's hook.

usage: hook_lint.py include/polycoll/communicator.hpp

In Communicator<B>, an error a call returns is made by reject() (the front
end's own checks) or comes back from the backend through returning(). This
fails when a new path skips both: `tl::unexpected(error(` (a check that would
not abort under OnError::abort), or a call of a backend operation
`self().<name>_impl(` outside `returning(` or `close_record(` (which passes
its result through returning()): an error the backend returns that would not
abort. The death tests (check.py) cover the paths that exist; this
catches the ones added later.
"""
import re
import sys

# Backend hooks that return no Error (or are the hook machinery itself).
NOT_OPERATIONS = {"world_size", "rank", "moved_from", "as_stream_sync", "on_error", "abort", "backend_name",
                  "flight_recorder", "reachable_recorders", "flight_record"}
# close_record(open, result) ends the call's flight record and passes the result through returning().
PASSES = ("returning(", "close_record(")


def main() -> int:
    lines = open(sys.argv[1]).read().splitlines()
    bad = []
    for n, line in enumerate(lines, 1):
        if "tl::unexpected(error(" in line:
            bad.append(f"{n}: a front-end error made without reject(): {line.strip()}")
        for m in re.finditer(r"self\(\)\.(\w+)_impl\(", line):
            if m.group(1) in NOT_OPERATIONS or "requires" in line[: m.start()]:
                continue
            # close_record()'s second argument may start on the line after it.
            before = line[: m.start()]
            continued = n >= 2 and lines[n - 2].rstrip().endswith("close_record(open,")
            if not any(p in before for p in PASSES) and not continued:
                bad.append(f"{n}: the backend's {m.group(1)}_impl result not passed through returning(): {line.strip()}")
    if bad:
        print("\n".join(bad))
        return 1
    print("ok: every front-end error passes reject() or returning()")
    return 0


if __name__ == "__main__":
    sys.exit(main())
