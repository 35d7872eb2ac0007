"""docker/grafana-dashboard.json shows what panstream serves on --metrics-port, and nothing else:
every metric a panel queries is one the code exports (read from the code's own registries, not
from a list kept by hand), and every exported metric has a panel."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from panstream.sources.kafka.metrics import KAFKA_TELEMETRY_SENSITIVITY, Metrics
from panstream.telemetry import TelemetryPolicy
from panstream.ingest import IngestStats
from panstream.windows.series import ReleaseMetrics, SeriesMetrics

DASHBOARD = Path(__file__).resolve().parents[2] / "docker" / "grafana-dashboard.json"
_METRIC = re.compile(r"\bpanstream_[a-z0-9_]+")


def exported() -> tuple[set[str], set[str]]:
    """``(sample names, family names)`` of every metric panstream serves: the Kafka consumer's
    (with the opt-in counts switched on, so their gauges exist) and the windowed series'."""
    registries = [Metrics(None, telemetry=TelemetryPolicy.noisy(0.5, KAFKA_TELEMETRY_SENSITIVITY))
                  .registry]
    series = SeriesMetrics(0)
    plain = ReleaseMetrics(0, "127.0.0.1", IngestStats)  # ingest without --window (issue 37)
    try:
        registries += [series.registry, plain.registry]
        samples, families = set(), set()
        for r in registries:
            for fam in r.collect():
                families.add(fam.name)
                samples |= {s.name for s in fam.samples}
                if fam.type == "gauge":  # its one sample name, served once a label set is
                    samples.add(fam.name)  # (lag by partition, the last window) is filled in
    finally:
        series.close()
        plain.close()
    return samples, families


def queried(dashboard: dict) -> set[str]:
    """Every ``panstream_*`` name in the dashboard's queries (panels, rows, variables)."""
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("expr", "query", "definition") and isinstance(v, str):
                    found.update(_METRIC.findall(v))
                else:
                    walk(v)
        elif isinstance(node, list):
            for x in node:
                walk(x)

    walk(dashboard)
    return found


def unknown_metrics(dashboard: dict) -> set[str]:
    samples, _ = exported()
    return queried(dashboard) - samples


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def test_the_dashboard_queries_only_metrics_the_code_exports(dashboard: dict) -> None:
    assert queried(dashboard), "the dashboard queries no panstream metric"
    assert unknown_metrics(dashboard) == set()


def test_a_made_up_or_misspelt_metric_is_caught(dashboard: dict) -> None:
    broken = json.loads(json.dumps(dashboard))
    broken["panels"][1]["targets"][0]["expr"] = "panstream_kafka_messages_total"  # never served
    # a counter's family name: Prometheus serves panstream_kafka_checkpoints_total
    broken["panels"][2]["targets"][0]["expr"] = "rate(panstream_kafka_checkpoints[5m])"
    assert unknown_metrics(broken) == {"panstream_kafka_messages_total",
                                       "panstream_kafka_checkpoints"}


def test_every_exported_metric_has_a_panel(dashboard: dict) -> None:
    _, families = exported()
    shown = {re.sub(r"_total$", "", m) for m in queried(dashboard)}
    assert families - shown == set()


def test_the_dashboard_imports_into_any_prometheus_datasource(dashboard: dict) -> None:
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for p in dashboard["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${DS_PROMETHEUS}" and p["targets"], p["title"]
            assert p["title"]
