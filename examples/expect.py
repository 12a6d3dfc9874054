#!/usr/bin/env python3
"""Runs a command that must fail cleanly: `expect.py STATUS TEXT -- CMD...`.

Passes when CMD exits with STATUS (not a signal, not another status) and its
output contains TEXT: a bad flag or argument is an Error message, not a crash.
"""
import subprocess
import sys

if len(sys.argv) < 5 or sys.argv[3] != "--":
    sys.exit("usage: expect.py STATUS TEXT -- CMD...")
want, text, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[4:]
proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
out = proc.stdout + proc.stderr
sys.stdout.write(out)
if proc.returncode != want or text not in out:
    sys.exit(f"expected exit status {want} and '{text}' in the output; got status {proc.returncode}")
print(f"ok: exit status {want}, message contains '{text}'")
