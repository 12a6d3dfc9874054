#!/usr/bin/env python3
"""The README's C++ example must be examples/readme.cpp verbatim (that file is
built and run by the test suite, so the README cannot rot)."""
import re
import sys

readme, example = sys.argv[1], sys.argv[2]
block = re.search(r"```cpp\n(.*?)```", open(readme).read(), re.S)
if not block:
    sys.exit("README.md has no ```cpp block")
if block.group(1) != open(example).read():
    sys.exit("README.md's example differs from examples/readme.cpp")
print("README example matches examples/readme.cpp")
