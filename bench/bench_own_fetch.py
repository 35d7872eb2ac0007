#!/usr/bin/env python3
"""What a fetch path of our own would save a routed member (issue 38, seventh round): a prototype.

    python bench/bench_own_fetch.py [--lines 4000000] [--rounds 3]

The member line of issue 38 (a member's CPU per line <= 1.5x ``ingest``'s) stays near 1.5 on 2
cores. docs/kafka.md ("Sixth round") names one code lever left: read the source topic without
librdkafka's consumer, decompressing each record batch straight into the buffer the parser reads,
so that ``consume()``'s copy of every value, the join into the parser's chunk and librdkafka's
own copies go away. Building it for real (our own Fetch beside librdkafka's group membership,
every codec, leader changes, seeks after rebalances) is days of work. This prototype measures
what it would buy before anyone builds it.

One Tansu broker (started here), one topic of 16 partitions holding the group bench's CLF lines
(500 a message, written by librdkafka with lz4, as ``bench_kafka_group.py --producer librdkafka
--compression lz4`` writes them). Each child process reads every line once and parses it with
the member's parser, and reports its CPU (``getrusage``: every thread, librdkafka's included):

* ``librdkafka``: the member's way. A confluent-kafka consumer assigned every partition;
  ``consume()`` in pieces of 40 messages, each piece fed to the member's own ``Decoder`` (the
  join into 2 MiB parser chunks, the parse), flushed every 1,000 messages.
* ``own fetch``: Fetch v4 requests on a plain socket (one partition at a time, up to 8 MiB
  each); each record batch's lz4 frame decompressed into a ``bytearray``
  (``lz4.frame.decompress(return_bytearray=True)``); the record framing between the values
  overwritten with newlines in place (the parser skips empty lines), so that the batch itself
  is the parser's chunk; parsed, then zeroed. The framing walk is Python (a few µs a record of
  500 lines); in C it would cost next to nothing. Its share is reported apart.
* ``ingest``: ``bench_kafka_group.py``'s ``in_process`` measure (the judged baseline), the same
  lines from a file.

Interleaved round by round. Prints one JSON line per child and a summary with each path's median
µs of CPU a line and ``librdkafka`` and ``own fetch`` over ``ingest``. Not a product path: no
group, no commits, no leader changes, no other codec; the numbers bound what the real one could
save.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import bench_kafka_group as group  # noqa: E402

PARTS = group.PARTS  # the group bench's topic: 16 partitions
PIECE, POLL = 40, 1000
PART_MAX = 8 << 20
#: ``own fetch``: gather batches into parser chunks of this many bytes (0: parse each batch
#: alone); set by ``--join`` in the child's environment.
JOIN = int(os.environ.get("OWN_FETCH_JOIN", "0"))


def cpu_now() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ------------------------------------------------------------------ librdkafka (the member's way)
def librdkafka_child(bootstrap: str, topic: str, messages: int) -> dict[str, float]:
    from confluent_kafka import Consumer, TopicPartition

    from panstream.inputs.parser import tune_allocator
    from panstream.sources.kafka.decode import Decoder
    from panstream.universe import Universe

    tune_allocator()
    dec = Decoder(Universe.parse(group.UNIVERSE), "lines", "clf")
    c0, t0 = cpu_now(), time.perf_counter()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"own-fetch-{os.getpid()}",
                  "enable.auto.commit": False, "fetch.queue.backoff.ms": 10,
                  "statistics.interval.ms": 0})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTS)])
    seen = fed = accepted = 0
    while seen < messages:
        msgs = c.consume(PIECE, timeout=1.0)
        values = [m.value() for m in msgs if m.error() is None]
        seen += len(values)
        fed += len(values)
        dec.feed(values)
        values.clear()
        if fed >= POLL:
            d = dec.flush()
            accepted += d.indices.size
            d.indices.fill(0)
            fed = 0
    d = dec.flush()
    accepted += d.indices.size
    c.close()
    return {"cpu_s": cpu_now() - c0, "wall_s": time.perf_counter() - t0, "accepted": accepted}


# ------------------------------------------------------------------ our own fetch (the prototype)
def fetch_request(corr: int, topic: str, partition: int, offset: int) -> bytes:
    """A Fetch v4 request for one partition (replica -1, wait 100 ms, read uncommitted)."""
    t = topic.encode()
    body = (struct.pack(">iiiib", -1, 100, 1, PART_MAX, 0) + struct.pack(">ih", 1, len(t)) + t
            + struct.pack(">iiqi", 1, partition, offset, PART_MAX))
    cid = b"bench-own-fetch"
    msg = struct.pack(">hhih", 1, 4, corr, len(cid)) + cid + body
    return struct.pack(">i", len(msg)) + msg


def recv_exact(sock: socket.socket, buf: bytearray, n: int) -> memoryview:
    view = memoryview(buf)[:n]
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("broker closed the connection")
        got += k
    return view


def record_set(resp: memoryview) -> memoryview:
    """The record set of a one-topic, one-partition Fetch v4 response (after its size)."""
    pos = 8  # correlation id, throttle time
    (ntopics,) = struct.unpack_from(">i", resp, pos)
    assert ntopics == 1
    (tlen,) = struct.unpack_from(">h", resp, pos + 4)
    pos += 6 + tlen
    (nparts,) = struct.unpack_from(">i", resp, pos)
    assert nparts == 1
    _, err, _, _, naborted = struct.unpack_from(">ihqqi", resp, pos + 4)
    if err:
        raise RuntimeError(f"fetch error {err}")
    pos += 4 + 4 + 2 + 8 + 8 + 4 + max(0, naborted) * 16
    (size,) = struct.unpack_from(">i", resp, pos)
    return resp[pos + 4:pos + 4 + max(0, size)]


def varint(buf: bytearray, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), i
        shift += 7


NEWLINES = b"\n" * 4096


def newlines(buf: bytearray, start: int, end: int) -> None:
    while start < end:
        n = min(end - start, len(NEWLINES))
        buf[start:start + n] = NEWLINES[:n]
        start += n


def frame_to_lines(d: bytearray, count: int) -> None:
    """Overwrite every byte of the record framing (lengths, deltas, keys, headers) with a
    newline, in place: what is left is the values, one line-separated text."""
    i = prev = 0
    for _ in range(count):
        length, i = varint(d, i)
        end = i + length
        i += 1                       # attributes
        _, i = varint(d, i)          # timestamp delta
        _, i = varint(d, i)          # offset delta
        klen, i = varint(d, i)
        i += max(0, klen)
        vlen, i = varint(d, i)
        if vlen > 0:
            newlines(d, prev, i)
            prev = i + vlen
        i = end                      # headers skipped with the rest of the record
    newlines(d, prev, len(d))


def own_fetch_child(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[str, float]:
    import lz4.frame
    import numpy as np

    from panstream.inputs.parser import LineParser, tune_allocator
    from panstream.universe import Universe

    tune_allocator()
    parser = LineParser(Universe.parse(group.UNIVERSE), "clf")
    host, port = bootstrap.rsplit(":", 1)
    c0, t0 = cpu_now(), time.perf_counter()
    sock = socket.create_connection((host, int(port)))
    buf = bytearray(PART_MAX + (1 << 20))
    accepted = corr = batches = held_bytes = 0
    held: list[bytearray] = []
    framing = 0.0
    for p in range(PARTS):
        offset = 0
        while offset < ends.get(p, 0):
            corr += 1
            sock.sendall(fetch_request(corr, topic, p, offset))
            (n,) = struct.unpack(">i", recv_exact(sock, buf, 4))
            if n > len(buf):
                buf = bytearray(n)
            rs = record_set(recv_exact(sock, buf, n))
            pos = 0
            while pos + 61 <= len(rs):
                base, blen = struct.unpack_from(">qi", rs, pos)
                if pos + 12 + blen > len(rs):
                    break  # a partial batch at the end of the response
                (attrs, last_delta) = struct.unpack_from(">hi", rs, pos + 21)
                (count,) = struct.unpack_from(">i", rs, pos + 57)
                payload = rs[pos + 61:pos + 12 + blen]
                codec = attrs & 7
                if codec == 3:
                    d = lz4.frame.decompress(payload, return_bytearray=True)
                elif codec == 0:
                    d = bytearray(payload)
                else:
                    raise RuntimeError(f"codec {codec}: the prototype reads lz4 and none only")
                f0 = time.thread_time()
                frame_to_lines(d, count)
                framing += time.thread_time() - f0
                batches += 1
                if JOIN:  # batches gathered into a parser chunk of about 2 MiB (one copy)
                    held.append(d)
                    held_bytes += len(d)
                    if held_bytes >= JOIN:
                        accepted += parse_joined(parser, held)
                        held_bytes = 0
                else:     # each batch is a parser chunk of its own (no copy)
                    r = parser.parse(memoryview(d))
                    accepted += r.indices.size
                    r.indices.fill(0)
                    np.frombuffer(d, np.uint8).fill(0)
                offset = base + last_delta + 1
                pos += 12 + blen
    if held:
        accepted += parse_joined(parser, held)
    sock.close()
    return {"cpu_s": cpu_now() - c0, "wall_s": time.perf_counter() - t0, "accepted": accepted,
            "framing_cpu_s": framing, "batches": batches}


def parse_joined(parser: object, held: list[bytearray]) -> int:
    """Parse the held batches as one chunk (joined: one copy), then zero all of it."""
    import numpy as np

    joined = bytearray(b"\n").join(held)
    r = parser.parse(memoryview(joined))  # type: ignore[attr-defined]
    n = int(r.indices.size)
    r.indices.fill(0)
    np.frombuffer(joined, np.uint8).fill(0)
    for d in held:
        np.frombuffer(d, np.uint8).fill(0)
    held.clear()
    return n


# ------------------------------------------------------------------ the bench
def child(argv: list[str]) -> dict[str, float]:
    got = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True,
                         cwd=ROOT)
    try:
        return json.loads(got.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RuntimeError(f"{argv[0]} failed: {got.stderr[-800:]}") from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lines", type=int, default=4_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compression", choices=("lz4", "none"), default="lz4",
                    help="the producer's codec (lz4: the judged shape of the member line)")
    ap.add_argument("--join", type=int, default=2 << 20, metavar="BYTES",
                    help="own fetch: gather batches into parser chunks of this size (0: parse "
                         "each batch alone, no copy)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        what, bootstrap, topic, extra = args.child[0], args.child[1], args.child[2], args.child[3]
        out = (librdkafka_child(bootstrap, topic, int(extra)) if what == "librdkafka" else
               own_fetch_child(bootstrap, topic, {int(k): v for k, v in json.loads(extra).items()}))
        print(json.dumps(out), flush=True)
        return
    msgs = group.messages(args.lines)
    lines = len(msgs) * group.PER_MSG
    work = Path(tempfile.mkdtemp(prefix="panstream-own-fetch-"))
    path = work / "all.log"
    with path.open("wb") as f:
        for m in msgs:
            f.write(m + b"\n")
    proc, bootstrap = group.start_tansu()
    try:
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        a = KafkaAdminClient(bootstrap_servers=bootstrap)
        a.create_topics([NewTopic("lines", PARTS, 1)])
        a.close()
        ends = group.produce(bootstrap, "lines", msgs, client="librdkafka",
                             compression=args.compression)
        os.environ["OWN_FETCH_JOIN"] = str(args.join)
        del msgs
        us: dict[str, list[float]] = {"librdkafka": [], "own fetch": [], "ingest": []}
        framing: list[float] = []
        for _ in range(args.rounds):
            r = child(["--child", "librdkafka", bootstrap, "lines", str(sum(ends.values()))])
            us["librdkafka"].append(r["cpu_s"] / lines * 1e6)
            print(json.dumps({"what": "librdkafka", **r}), flush=True)
            r = child(["--child", "own", bootstrap, "lines", json.dumps(ends)])
            us["own fetch"].append(r["cpu_s"] / lines * 1e6)
            framing.append(r["framing_cpu_s"] / lines * 1e6)
            print(json.dumps({"what": "own fetch", **r}), flush=True)
            got = subprocess.run([sys.executable, str(HERE / "bench_kafka_group.py"),
                                  "--ingest-in-process", str(path), "2"],
                                 capture_output=True, text=True, cwd=ROOT)
            cpu = json.loads(got.stdout.strip().splitlines()[-1])["cpu_s"]
            us["ingest"] += [c / lines * 1e6 for c in cpu]
            print(json.dumps({"what": "ingest", "cpu_s": cpu}), flush=True)
        med = {k: statistics.median(v) for k, v in us.items()}
        print(json.dumps({
            "what": "summary", "lines": lines, "compression": args.compression,
            "join": args.join, "load": round(os.getloadavg()[0], 2),
            "us_per_line": {k: [round(x, 4) for x in v] for k, v in us.items()},
            "median_us_per_line": {k: round(v, 4) for k, v in med.items()},
            "own_fetch_framing_us_per_line": [round(x, 4) for x in framing],
            "librdkafka_over_ingest": round(med["librdkafka"] / med["ingest"], 3),
            "own_fetch_over_ingest": round(med["own fetch"] / med["ingest"], 3),
            "own_fetch_less_framing_over_ingest": round(
                (med["own fetch"] - statistics.median(framing)) / med["ingest"], 3)}), flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        path.unlink(missing_ok=True)
        work.rmdir()


if __name__ == "__main__":
    main()
