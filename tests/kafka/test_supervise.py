"""The supervised child of ``panstream kafka`` (issue 35): a librdkafka member runs in a child
process, so that librdkafka's crash (SIGSEGV when a topic it fetches is deleted) ends the command
with one line and exit 1, never a death by signal (``panstream/sources/kafka/supervise.py``).

These tests run :func:`~panstream.sources.kafka.supervise.supervise` in a small program of their
own (no broker): its child stands for the member. The broker scenario (a topic deleted under a
librdkafka member) is ``tests/kafka/test_topology.py``; Ctrl+C on a routed librdkafka member is
``tests/kafka/test_ctrl_c.py``.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from panstream.sources.kafka.supervise import death_line, supervise

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

#: The program: supervise, then the child does what argv[1] says.
PROGRAM = r"""
import os, signal, sys, time
from panstream.sources.kafka.supervise import supervise
code = supervise()
if code is not None:
    sys.exit(code)
what = sys.argv[1]
if what == "term":  # before the pid is printed: the test signals as soon as it reads it
    signal.signal(signal.SIGTERM, lambda s, f: (print("member: SIGTERM", flush=True), sys.exit(7)))
print(os.getpid(), flush=True)
if what == "crash":
    print("the member's own line", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)
while True:
    time.sleep(0.05)
"""


def _start(what: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", PROGRAM, what], env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0]


def _until(what: object, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not what():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the child did not get there"
        time.sleep(0.05)


def test_a_crash_of_the_child_is_one_line_and_exit_1() -> None:
    p = _start("crash")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 1  # not -11: the command never dies of the child's signal
    lines = err.splitlines()
    assert lines[0] == "the member's own line"  # the child's stderr reaches the user
    [line] = [ln for ln in lines if ln.startswith("panstream: error:")]
    assert "died of SIGSEGV, a crash inside librdkafka" in line
    assert "nothing committed is lost" in line and "then restart" in line


def test_signals_are_forwarded_once_and_the_childs_status_is_the_commands() -> None:
    p = _start("term")
    try:
        child = int(p.stdout.readline())  # type: ignore[union-attr]
        assert child != p.pid and os.getpgid(child) == child  # a process group of its own
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 7, err
    assert out.splitlines() == ["member: SIGTERM"] and "error" not in err


def test_a_pause_of_the_command_pauses_the_child() -> None:
    p = _start("wait")
    try:
        child = int(p.stdout.readline())  # type: ignore[union-attr]
        p.send_signal(signal.SIGSTOP)
        _until(lambda: _state(child) == "T")
        p.send_signal(signal.SIGCONT)
        _until(lambda: _state(child) != "T")
        p.send_signal(signal.SIGTERM)  # the default action: the child dies of it, so does p
        assert p.wait(timeout=60) == -signal.SIGTERM
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_every_pause_of_the_command_pauses_the_child_again() -> None:
    """The child's watch reads the command's state afresh at every look (one descriptor kept
    open, read again from its start: issue 38, an idle member's CPU), so a second pause is
    followed as the first was."""
    p = _start("wait")
    try:
        child = int(p.stdout.readline())  # type: ignore[union-attr]
        for _ in range(2):
            p.send_signal(signal.SIGSTOP)
            _until(lambda: _state(child) == "T")
            p.send_signal(signal.SIGCONT)
            _until(lambda: _state(child) != "T")
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == -signal.SIGTERM
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_kill_9_of_the_command_ends_the_child() -> None:
    p = _start("wait")
    child = int(p.stdout.readline())  # type: ignore[union-attr]
    p.kill()
    p.wait(timeout=30)

    def gone() -> bool:
        try:
            return _state(child) == "Z"
        except OSError:
            return True

    _until(gone)


def test_nothing_is_forked_where_stdio_are_not_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in-process by click's CliRunner, the child's output could not reach the caller."""
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert supervise() is None


def test_the_lines_name_the_signal_and_what_to_do() -> None:
    assert death_line(signal.SIGKILL).startswith("the member process was killed by SIGKILL")
    assert "died of SIGBUS, a crash inside librdkafka" in death_line(signal.SIGBUS, "x")
    assert death_line(signal.SIGUSR1).startswith("the member process died of SIGUSR1; ")
