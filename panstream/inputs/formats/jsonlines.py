"""JSON lines (``json:PATH``): Caddy, GCP Cloud Logging, Envoy, Zeek's JSON logs, any JSON.

The client is a string field by dotted path (``request.remote_ip``), found vectorized where its
last key appears once in the line (:class:`panstream.inputs.extractors.JsonField`). ``-f auto``
names the first of :data:`JSON_PATHS` that holds an address in the first lines (else any string
field, two levels deep at most, that does). The time is the first of :data:`JSON_TIME_KEYS` a line
has: epoch seconds (Caddy's ``"ts":1795600000.123``, a number or a string) or ISO 8601 (GCP's
``timestamp``, Envoy's ``start_time``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np

from panstream.inputs.extractors import JsonField, json_get
from panstream.inputs.formats.base import (
    Format,
    LogFormat,
    Sample,
    TimeRule,
    bad_format,
    column_arg,
    is_address,
    register,
)
from panstream.inputs.scan import windows
from panstream.inputs.timestamps import ISO_WIDTH, NAT, read_epoch, read_iso

if TYPE_CHECKING:
    from panstream.inputs.formats.base import Detection

#: JSON paths that hold the client address in the published shapes, in order of preference:
#: Caddy (``client_ip`` is the client behind trusted proxies, Caddy >= 2.7), GCP Cloud Logging's
#: ``HttpRequest``, Envoy's default JSON access log, Zeek's JSON logs, then common flat names.
JSON_PATHS = ("request.client_ip", "request.remote_ip", "httpRequest.remoteIp",
              "downstream_remote_address", "id.orig_h", "remote_addr", "remote_ip", "client_ip",
              "clientIp", "src_ip", "ip")


def _json_path(obj: object) -> str | None:
    for path in JSON_PATHS:
        v = json_get(obj, path.split("."))
        if isinstance(v, str) and is_address(v.encode()):
            return path
    # Any string field (two levels deep at most) that holds an address.
    stack: list[tuple[str, object]] = [("", obj)]
    while stack:
        prefix, o = stack.pop(0)
        if not isinstance(o, dict):
            continue
        for k, v in o.items():
            p = f"{prefix}{k}"
            if isinstance(v, str) and is_address(v.encode()):
                return p
            if isinstance(v, dict) and prefix.count(".") < 1:
                stack.append((p + ".", v))
    return None


def _detect(s: Sample) -> Detection | None:
    if not s.first.startswith(b"{"):
        return None
    for ln in s.lines[:8]:
        try:
            path = _json_path(json.loads(ln))
        except ValueError:
            continue
        if path:
            return s.found(f"json:{path}")
    return s.unknown("JSON lines without a known address field",
                     "JSON lines without a known address field; candidates: -f json:PATH "
                     "(e.g. json:request.remote_ip, json:httpRequest.remoteIp) (docs/logs.md)")


def _path(spec: str, arg: str) -> Format:
    if "" in arg.strip().split("."):
        raise bad_format(spec, " (json needs a path)")
    return column_arg(spec, "json", arg)


def _title(arg: str) -> str:
    if arg.startswith("request."):
        return "Caddy JSON"
    return {"httpRequest.remoteIp": "GCP Cloud Logging JSON",
            "downstream_remote_address": "Envoy JSON"}.get(arg, "JSON lines")


def _fix(kind: str, arg: str) -> str:
    return (f"name the client field of these JSON lines (not {arg!r}): -f "
            "json:request.remote_ip (Caddy), json:httpRequest.remoteIp (GCP), "
            "json:downstream_remote_address (Envoy) or json:PATH")


#: JSON keys of a record's time, in order of preference, in the published shapes: Caddy and
#: Zeek (``ts``), GCP Cloud Logging (``timestamp``), Envoy (``start_time``), then common names.
JSON_TIME_KEYS = ("ts", "timestamp", "start_time", "time", "@timestamp")
_JSON_KEYS = [(k, b'"%s"' % k.encode()) for k in JSON_TIME_KEYS]


def _find_key(data: bytes, key: bytes) -> np.ndarray:
    """Every position of ``key`` in ``data``: one ``bytes.split`` in C (a memchr-speed literal
    search), the positions from the pieces' lengths; no Python work per hit. The pieces (the
    chunk's bytes between keys) are dropped at once."""
    if key not in data:  # a search without copies: most chunks hold only one of the keys
        return np.zeros(0, dtype=np.intp)
    pieces = data.split(key)
    try:
        if len(pieces) == 1:
            return np.zeros(0, dtype=np.intp)
        lens = np.fromiter(map(len, pieces), dtype=np.intp, count=len(pieces))
    finally:
        pieces.clear()
    lens[:-1] += len(key)
    pos = np.cumsum(lens[:-1]) - len(key)
    lens.fill(0)
    return pos


def _json_values(b: np.ndarray, data: bytes, key: bytes, klen: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``(value starts, quoted)`` after every ``"key"`` followed by ``:`` (a blank allowed on each
    side), vectorized."""
    pos = _find_key(data, key)
    if pos.size == 0:
        return pos, np.zeros(0, dtype=bool)
    w = windows(b, pos + klen, 4)
    try:
        colon1 = w[:, 0] == ord(":")
        colon2 = (w[:, 0] == ord(" ")) & (w[:, 1] == ord(":"))
        after = np.where(colon1, 1, 2)  # past the colon
        ok = colon1 | colon2
        blank = w[np.arange(w.shape[0]), after] == ord(" ")
        after += blank
        quoted = w[np.arange(w.shape[0]), np.minimum(after, 3)] == ord('"')
        vs = pos + klen + after + quoted
    finally:
        w.fill(0)
    pos.fill(0)
    return vs[ok], quoted[ok]


def json_times(b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """JSON lines: the value of the first time key (:data:`JSON_TIME_KEYS`, in order) a line has,
    its first occurrence: an ISO 8601 string or epoch seconds (a number or a string). Keys are
    searched as literals (:func:`_find_key`) over the whole chunk (the next key only while lines
    are left without a time); the values are parsed vectorized."""
    n = starts.size
    out = np.full(n, NAT)
    if n == 0:
        return out
    left = n
    done = np.zeros(n, dtype=bool)
    data = b.tobytes()  # one copy of the chunk for the searches, gone with the call
    for k, key in _JSON_KEYS:
        vs, q = _json_values(b, data, key, len(k) + 2)
        if vs.size == 0:
            continue
        line = np.searchsorted(ends, vs, side="left")
        inside = line < n
        vs, q, line = vs[inside], q[inside], line[inside]
        rows, first = np.unique(line, return_index=True)  # the key's first occurrence per line
        new = ~done[rows]
        rows, vs, q = rows[new], vs[first[new]], q[first[new]]
        if rows.size:
            _json_parse(b, ends, rows, vs, q, out)
            done[rows] = True
            left -= int(rows.size)
        line.fill(0)
        if left == 0:
            break
    return out


def _json_parse(b: np.ndarray, ends: np.ndarray, rows: np.ndarray, vs: np.ndarray, q: np.ndarray,
                out: np.ndarray) -> None:
    w = windows(b, vs, ISO_WIDTH)
    try:
        w[(vs[:, None] + np.arange(ISO_WIDTH)[None, :]) >= ends[rows][:, None]] = 0
        # an ISO date has '-' at column 4; anything else is read as epoch seconds
        iso = w[:, 4] == ord("-")
        for sel, parse in ((iso & q, read_iso), (~iso, read_epoch)):
            r = np.flatnonzero(sel)
            if r.size:
                secs, good = parse(w[r])
                out[rows[r[good]]] = secs[good].astype("datetime64[s]")
                secs.fill(0)
    finally:
        w.fill(0)


register(LogFormat(
    "json", "JSON lines", order=40, help="json:PATH", aliases={"caddy": "json:request.client_ip"},
    shown_aliases=("caddy",), arg="required", parse_arg=_path,
    extractor=lambda fmt, n: JsonField(fmt.arg, n), detect=_detect, rank=300, fix=_fix,
    where_help="json:PATH", titled=_title,
    time=TimeRule(reader=lambda fmt: json_times, note="JSON: a ts/timestamp/start_time key")))
