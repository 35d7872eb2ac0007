"""A routed member keeps its heap from poll to poll (issue 38).

Each poll of the routing stage receives its source values as fresh ``bytes`` on the routing
thread and frees them after the parse. With glibc's defaults the freed pages went back to the
kernel after every poll, and the next poll faulted them in again: 40-50 ns of a member's 200-250
a line. :func:`~panstream.sources.kafka.build.steady_heap` keeps them mapped. These tests count
the page faults of a poll-shaped workload on a thread (a kernel counter, not a clock), in a
process of its own, so the setting never reaches the test process.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="a glibc setting")

#: One "poll": 1,000 values of 50 KB, copied fresh (as a consumer hands them out), then freed.
POLLS = r"""
import json, os, resource, sys, threading
from panstream.sources.kafka.build import steady_heap
set_ = steady_heap()
src = os.urandom(50_000)
faults = []
def polls():
    for _ in range(4):
        f0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        values = [src[1:] for _ in range(1000)]
        del values
        faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - f0)
t = threading.Thread(target=polls)
t.start()
t.join()
print(json.dumps({"set": set_, "faults": faults}))
"""

#: The pages one poll's values occupy.
PAGES = 1000 * 50_000 // 4096


def polls() -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", POLLS], capture_output=True, text=True,
                         check=True, env=dict(os.environ), timeout=60)
    return json.loads(out.stdout)


def test_after_the_first_poll_the_values_land_on_pages_already_mapped() -> None:
    got = polls()
    assert got["set"] is True
    first, *later = got["faults"]  # type: ignore[misc]
    assert first > PAGES // 2  # the first poll maps its pages once
    assert all(f < PAGES // 20 for f in later), got  # then they stay: no fault per poll

