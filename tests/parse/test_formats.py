"""Every log format of issue 20 is counted right, in one chunk and across chunks, and its wrong
cases are counted as malformed, never as some other client.

The samples come from :mod:`logsamples` (tests/logsamples.py) (the published shapes: tabs, single spaces,
``#Fields:``/``#fields`` headers, CRLF CSV, quoted CSV cells); each knows its truth.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logsamples import GENERATORS, UNIVERSE, generate

from panstream.errors import ConfigurationError
from panstream.inputs.normalize import normalize_address
from panstream.inputs.parser import LineParser, ParseResult, detect, parse_format
from panstream.sources.files import ChunkReader
from panstream.universe import Universe

U = Universe.parse(UNIVERSE)
ANY4 = Universe.parse("ipv4:0.0.0.0/0")


def run(data: bytes, fmt: str, universe: Universe = U, chunk: int | None = None) -> ParseResult:
    """Parse ``data`` in one call, or through the reader in chunks of ``chunk`` bytes (one parser:
    header formats keep their header from chunk to chunk)."""
    p = LineParser(universe, fmt)
    if chunk is None:
        return p.parse(data)
    idx, lines, empty, malformed, outside, headers = [], 0, 0, 0, 0, 0
    for c in ChunkReader(io.BytesIO(data).readinto, chunk_size=chunk, max_line=4096):
        r = p.parse(c)
        idx.append(r.indices)
        lines, empty = lines + r.lines, empty + r.empty
        malformed, outside = malformed + r.malformed, outside + r.outside
        headers += r.headers
    return ParseResult(np.concatenate(idx), lines, empty, malformed, outside, headers)


def addrs(r: ParseResult, universe: Universe = ANY4) -> list[str]:
    return [universe.item_of(int(i)) for i in r.indices]


@pytest.mark.parametrize("name", sorted(GENERATORS))
@pytest.mark.parametrize("chunk", [None, 8192])
def test_each_format_counts_every_client_of_its_sample(name: str, chunk: int | None) -> None:
    s = generate(name, lines=3000, distinct=800, seed=5)
    r = run(s.data, GENERATORS[name][1], chunk=chunk)
    assert r.accepted == s.accepted
    assert len(set(r.indices.tolist())) == s.truth
    assert r.lines == r.accepted + r.empty + r.malformed + r.outside + r.headers
    header_formats = ("csv", "tsv", "w3c", "zeek")
    if GENERATORS[name][1].partition(":")[0] in header_formats:
        assert r.headers >= 1 and r.empty == 0  # issue 37: '#' and header lines are no blanks
    else:
        assert r.headers == 0


@pytest.mark.parametrize("name", sorted(set(GENERATORS) - {"xff", "iptables"}))
def test_auto_recognises_each_format(name: str) -> None:
    s = generate(name, lines=200, distinct=100, seed=6)
    spec = detect(s.data).spec
    r = run(s.data, spec)
    assert r.accepted == s.accepted, spec


def test_auto_reads_a_proxied_log_as_clf_and_says_xff_would_count_the_clients() -> None:
    d = detect(generate("xff", lines=200, distinct=100).data)
    assert d.spec == "clf" and "-f xff" in d.note and "--trusted-proxy" in d.note


# ------------------------------------------------------------------ spellings of one address
@pytest.mark.parametrize(("token", "want"), [
    ("10.0.0.1:443", "10.0.0.1"), ("10.0.0.1:0", "10.0.0.1"), ("10.0.0.1:65535", "10.0.0.1"),
    ("::ffff:10.0.0.1", "10.0.0.1"), ("::FFFF:10.0.0.1", "10.0.0.1"),
    ("[::ffff:10.0.0.1]:80", "10.0.0.1"), ("10.0.0.1", "10.0.0.1"),
    ("10.0.0.1:65536", None), ("10.0.0.1:", None), ("10.0.0.1:8o", None), ("10.0.0.1:123456", None),
    ("10.0.0.01:80", None), (":80", None), ("10.0.0.1::80", None), ("[10.0.0.1]", None),
])
@pytest.mark.parametrize("fmt", ["alb", "plain", "clf", "json:a"])
def test_ports_and_mapped_addresses_in_every_path(token: str, want: str | None, fmt: str) -> None:
    line = {"alb": f"https 2026-11-24T10:00:00Z app/lb/1 {token} 10.1.0.9:80 0 0 0 200",
            "plain": token, "clf": f"{token} - - [x] \"GET /\" 200 1",
            "json:a": f'{{"a": "{token}"}}'}[fmt]
    r = run(line.encode() + b"\n", fmt, ANY4)
    assert (addrs(r) or [None]) == [want]
    assert r.lines == 1 and r.accepted + r.malformed == 1


def test_ipv6_universe_takes_bracketed_and_zoned_addresses() -> None:
    u6 = Universe.parse("ipv6:2001:db8::/48@64")
    data = (b'{"downstream_remote_address":"[2001:db8:0:5::1]:443"}\n'
            b'{"downstream_remote_address":"10.0.0.1:443"}\n'
            b'{"downstream_remote_address":"[2001:db8:0:6::1%eth0]:443"}\n')
    r = run(data, "json:downstream_remote_address", u6)
    assert (r.indices.tolist(), r.outside) == ([5, 6], 1)


# ------------------------------------------------------------------ JSON
def test_json_wrong_cases_are_malformed_and_irregular_lines_are_parsed_exactly() -> None:
    lines = [
        b'{"request": {"remote_ip": "10.0.0.1"}}',            # fast path
        b'{"request":{"remote_ip":"10.0.0.2","x":{"remote_ip":"9.9.9.9"}}}',  # twice: json parse
        b'{"request": {"remote_ip": null}}',                   # not a string
        b'{"request": {"remote_ip": 167772163}}',              # a number is no address here
        b'{"request": {"other": "10.0.0.4"}}',                 # missing
        b'{"request": {"remote_ip": "10.0.0.5"',               # truncated JSON (fast path reads it)
        b'not json at all',
        b'{"request": {"remote_ip": "not-an-ip"}}',
        b'{"request": {"remote_ip": "10.0.0.\\u0036"}}',       # an escape: malformed (documented)
        b'',
        b'   ',
        b'{"request": {"remote_ip": "2001:db8::1"}}',          # IPv6 in an ipv4 universe: outside
    ]
    r = run(b"\n".join(lines) + b"\n", "json:request.remote_ip", ANY4)
    assert addrs(r) == ["10.0.0.1", "10.0.0.2", "10.0.0.5"]
    assert (r.lines, r.empty, r.outside, r.malformed) == (12, 2, 1, 6)


def test_json_path_through_a_list_index() -> None:
    data = b'{"hops": ["10.0.0.9", "10.0.0.1"]}\n'
    assert addrs(run(data, "json:hops.0", ANY4)) == ["10.0.0.9"]


def test_json_line_over_the_limit_is_malformed_unless_its_field_ends_in_the_head() -> None:
    head = b'{"request":{"remote_ip":"10.0.0.1"},"pad":"' + b"x" * 9000 + b'"}\n'
    tail = b'{"pad":"' + b"x" * 9000 + b'","request":{"remote_ip":"10.0.0.2"}}\n'
    for chunk in (None, 8192):
        r = run(head + tail, "json:request.remote_ip", ANY4, chunk)
        assert addrs(r) == ["10.0.0.1"] and r.malformed == 1


# ------------------------------------------------------------------ CSV / TSV
def test_csv_by_name_header_repeated_and_renamed_across_concatenated_files() -> None:
    a = b"ts,src_addr,dst\r\n1,10.0.0.1,x\r\n2,\"10.0.0.2\",\"a,b\"\r\n"
    b = b"src_addr,ts\n10.0.0.3,3\n"  # another export, other column order
    r = run(a + a + b, "csv:src_addr", ANY4)
    assert addrs(r) == ["10.0.0.1", "10.0.0.2"] * 2 + ["10.0.0.3"]
    assert (r.headers, r.empty, r.malformed) == (3, 0, 0)  # three headers, no blank line


def test_csv_column_missing_from_the_header_makes_every_row_malformed() -> None:
    r = run(b"ts,ip\n1,10.0.0.1\n2,10.0.0.2\n", "csv:src_addr", ANY4)
    assert (r.accepted, r.headers, r.malformed) == (0, 1, 2)


@pytest.mark.parametrize(("data", "accepted", "headers"), [
    (b"ts\tsrc\n1\t10.0.0.1\n2\t10.0.0.2\n", 2, 1),   # a header (no digit in column 2)
    (b"1\t10.0.0.1\n2\t10.0.0.2\n", 2, 0),            # no header
])
def test_tsv_by_number_with_or_without_header(data: bytes, accepted: int, headers: int) -> None:
    r = run(data, "tsv:2", ANY4)
    assert (r.accepted, r.headers, r.empty, r.malformed) == (accepted, headers, 0, 0)


def test_csv_short_rows_and_blank_cells() -> None:
    r = run(b"a,b,c\n1,10.0.0.1,3\n1\n1,,3\n\n", "csv:b", ANY4)
    assert (r.accepted, r.headers, r.empty, r.malformed) == (1, 1, 2, 1)  # blank cell and line


# ------------------------------------------------------------------ W3C / Zeek
def test_w3c_data_before_a_header_is_malformed_and_a_new_header_is_read() -> None:
    data = (b"2026-11-24\t10:00:00\t10.0.0.9\n"
            b"#Version: 1.0\n#Fields: date time c-ip\n2026-11-24\t10:00:00\t10.0.0.1\n"
            b"#Fields: c-ip date time\n10.0.0.2\t2026-11-24\t10:00:00\n")
    r = run(data, "w3c:c-ip", ANY4)
    assert addrs(r) == ["10.0.0.1", "10.0.0.2"] and (r.malformed, r.headers, r.empty) == (1, 3, 0)


def test_w3c_iis_separates_with_spaces_and_crlf() -> None:
    data = (b"#Software: Microsoft Internet Information Services 10.0\r\n#Version: 1.0\r\n"
            b"#Fields: date time s-ip cs-method cs-uri-stem c-ip cs(User-Agent)\r\n"
            b"2026-11-24 10:00:00 10.1.0.9 GET / 10.0.0.1 Mozilla/5.0\r\n")
    assert addrs(run(data, "w3c:c-ip", ANY4)) == ["10.0.0.1"]


def test_zeek_unset_fields_and_a_header_cut_by_chunks() -> None:
    s = generate("zeek", lines=4000, distinct=500, seed=9)
    broken = s.data.replace(b"\t10.0.", b"\t-\t", 1)  # one unset (or damaged) field
    r = run(broken, "zeek:id.orig_h", chunk=8192)
    assert r.accepted == s.accepted - 1 and r.malformed == 1


# ------------------------------------------------------------------ regex, sshd, xff
def test_sshd_counts_failed_and_accepted_logins_only() -> None:
    lines = [
        b"Nov 24 10:00:00 h sshd[1]: Failed password for invalid user bob from 10.0.0.1 port 2 ssh2",
        b"Nov 24 10:00:00 h sshd[1]: Failed password for root from 10.0.0.2 port 22 ssh2",
        b"Nov 24 10:00:00 h sshd[1]: Accepted publickey for a b from 10.0.0.3 port 22 ssh2: RSA x",
        b"Nov 24 10:00:00 h sshd-session[1]: Failed none for x from ::ffff:10.0.0.4 port 22 ssh2",
        b"Nov 24 10:00:00 h sshd[1]: Connection closed by 10.0.0.5 port 22 [preauth]",
        b"Nov 24 10:00:00 h CRON[2]: pam_unix(cron:session): session opened for user root",
    ]
    r = run(b"\n".join(lines) + b"\n", "sshd", ANY4)
    assert addrs(r) == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"] and r.malformed == 2


def test_regex_takes_its_named_group_and_refuses_patterns_without_one() -> None:
    data = b"DROP IN=eth0 SRC=10.0.0.7 DST=10.1.0.9\nACCEPT SRC=junk\nnothing\n"
    r = run(data, r"regex:SRC=(?P<src>\S+)", ANY4)
    assert addrs(r) == ["10.0.0.7"] and r.malformed == 2
    with pytest.raises(ConfigurationError, match="group"):
        parse_format("regex:SRC=\\S+")
    with pytest.raises(ConfigurationError, match="compile"):
        parse_format("regex:(unclosed")


XFF_LINES = [
    (b'172.16.0.9 - - [x] "GET /" 200 1 "-" "ua" "10.0.0.1, 172.16.0.2"', "10.0.0.1", "10.0.0.1"),
    (b'172.16.0.9 - - [x] "GET /" 200 1 "-" "ua" "10.9.9.9, 10.0.0.1, 172.16.0.2"',
     "10.9.9.9", "10.0.0.1"),  # a forged first hop: only the trusted-proxy walk is right
    (b'10.0.0.3 - - [x] "GET /" 200 1 "-" "ua" "-"', "10.0.0.3", "10.0.0.3"),  # no proxy
    (b'172.16.0.9 - - [x] "GET /" 200 1 "-" "ua" "172.16.0.1"', "172.16.0.1", "172.16.0.1"),
    (b'172.16.0.9 - - [x] "GET /" 200 1 "-" "ua" "[2001:db8::1]:443, 172.16.0.2"', None, None),
    (b'172.16.0.9 - - [x] "GET /" 200 1 "-" "ua" "unknown, 172.16.0.2"', None, None),
]


@pytest.mark.parametrize(("line", "first", "trusted"), XFF_LINES)
def test_xff_first_hop_or_last_untrusted_hop(line: bytes, first: str | None,
                                             trusted: str | None) -> None:
    assert (addrs(run(line + b"\n", "xff", ANY4)) or [None]) == [first]
    assert (addrs(run(line + b"\n", "xff:172.16.0.0/24", ANY4)) or [None]) == [trusted]


# ------------------------------------------------------------------ field:N, vectorized
field_text = st.text(st.sampled_from(["10.0.0.1", "1.2.3.4:80", "x", "", " ", "  ", "\t", "-"]),
                     max_size=8).map(lambda t: t)
line_st = st.lists(st.sampled_from(["10.0.0.1", "1.2.3.4:80", "x", "::ffff:1.2.3.4", "01.2.3.4",
                                    "", " ", "\t", "-"]), max_size=8).map(" ".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(line_st, min_size=1, max_size=30), st.integers(1, 4))
def test_vectorized_field_n_matches_awk(lines: list[str], n: int) -> None:
    data = "\n".join(lines).encode() + b"\n"
    r = run(data, f"field:{n}", ANY4)
    want = []
    for ln in lines:
        f = ln.split()
        if len(f) >= n:
            try:
                t = f[n - 1].replace("::ffff:", "")
                want.append(str(ipaddress.IPv4Address(t.split(":")[0] if t.count(":") == 1
                                                      and t.split(":")[1].isdigit() else t)))
            except ValueError:
                pass
    assert addrs(r) == want
    assert r.lines == len(lines) == r.accepted + r.empty + r.malformed + r.outside


# ------------------------------------------------------------------ the -f spelling
@pytest.mark.parametrize("spec", ["plain", "clf", "field:3", "json:request.remote_ip", "csv:src_addr",
                                  "csv:2", "tsv:3", "w3c:c-ip", "zeek:id.orig_h", "alb", "elb",
                                  "vhost", "sshd", "xff", "xff:10.0.0.0/8,fd00::/8",
                                  r"regex:from (?P<ip>\S+) port"])
def test_spec_round_trips(spec: str) -> None:
    assert parse_format(spec).spec == spec
    assert parse_format(parse_format(spec).spec) == parse_format(spec)


@pytest.mark.parametrize("spec", ["xml", "field:0", "json:", "json:a..b", "csv:", "csv:0",
                                  "xff:10.0.0.0/33", "json"])
def test_bad_specs_say_what_is_accepted(spec: str) -> None:
    with pytest.raises(ConfigurationError, match="json:PATH"):
        parse_format(spec)


def test_csv_quoted_cells_with_separators_before_the_column_are_read_vectorized() -> None:
    data = (b'"name","src_addr","note"\n"a,b","10.0.0.1","x"\n"c ""d"", e","10.0.0.2",""\n'
            b'"f",10.0.0.3,"g,h"\n"i","10.0.0.4\n')  # unclosed at the line end: as csv reads it
    r = run(data, "csv:src_addr", ANY4)
    assert addrs(r) == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"] and r.malformed == 0


def test_zeek_json_keys_hold_dots_themselves() -> None:
    data = (b'{"ts":1795600000.1,"uid":"C1","id.orig_h":"10.0.0.1","id.orig_p":51234,'
            b'"id.resp_h":"10.1.0.9","id.resp_p":443,"proto":"tcp"}\n') * 3
    assert detect(data).spec == "json:id.orig_h"
    r = run(data, "json:id.orig_h", ANY4)
    assert addrs(r) == ["10.0.0.1"] * 3


cell = st.sampled_from(["10.0.0.1", "10.0.0.2", '"10.0.0.3"', "x", "", '"a,b"', 'a"b', '"c""d"',
                        " 10.0.0.4", '"10.0.0.5', "10.0.0.6:80", '"e"f', ",", '""'])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(cell, min_size=1, max_size=5).map(",".join), min_size=1, max_size=20),
       st.integers(1, 3))
def test_vectorized_csv_columns_match_the_csv_module(rows: list[str], col: int) -> None:
    import csv as csvmod

    data = ("\n".join(rows) + "\n").encode()
    p = LineParser(ANY4, f"csv:{col}")
    p._extractor.seen_first = True  # type: ignore[union-attr]  # every line is data here
    r = p.parse(data)
    want = []
    for row in rows:
        cells = next(csvmod.reader([row]), [])
        if len(cells) >= col:
            t = normalize_address(cells[col - 1].encode())
            with contextlib.suppress(ValueError):
                want.append(str(ipaddress.IPv4Address(t.decode())))
    assert addrs(r) == want


value = st.sampled_from(["10.0.0.1", "10.0.0.2:443", "::ffff:10.0.0.3", "junk", "", None, 7,
                         "10.0.0.4\\", '10.0.0.5"', "10.0.0.\u0036", ["10.0.0.7"], {"a": 1},
                         'x"remote_ip": "10.0.0.8'])
inner_obj = st.dictionaries(st.sampled_from(["remote_ip", "proto", "a", "remote_port"]), value,
                            max_size=4)
outer_obj = st.dictionaries(st.sampled_from(["request", "x", "remote_ip", "status"]),
                            st.one_of(value, inner_obj), max_size=4)


def _keys(o: object, name: str) -> list[object]:
    """Every value held under the key ``name`` anywhere in ``o``."""
    out: list[object] = []
    if isinstance(o, dict):
        for k, v in o.items():
            if k == name:
                out.append(v)
            out += _keys(v, name)
    elif isinstance(o, list):
        for v in o:
            out += _keys(v, name)
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(outer_obj, st.sampled_from([(",", ":"), (", ", ": ")])), min_size=1,
                max_size=15))
def test_json_fast_path_agrees_with_json_loads(objs: list[tuple[dict, tuple[str, str]]]) -> None:
    """The reference is json.loads at the path, except the one documented shortcut: a line where
    the leaf key appears exactly once with a string value (``"remote_ip": "..."``) is read there
    even if that is not at the path (docs/logs.md, Caddy)."""
    import json

    from panstream.inputs.extractors import json_get

    lines = [json.dumps(o, separators=sep) for o, sep in objs]
    r = run(("\n".join(lines) + "\n").encode(), "json:request.remote_ip", ANY4)
    want = []
    for o, _ in objs:
        v = json_get(o, ["request", "remote_ip"])
        found = [x for x in _keys(o, "remote_ip") if isinstance(x, str)]
        if len(found) == 1:  # "remote_ip": "..." once in the line: the fast path reads it
            v = found[0]
        if isinstance(v, str):
            with contextlib.suppress(ValueError, UnicodeEncodeError):
                want.append(str(ipaddress.IPv4Address(normalize_address(v.encode()).decode())))
    assert addrs(r) == want


hop = st.sampled_from(["10.0.0.1", "10.0.0.2:5000", "172.16.0.3", "172.16.0.9", "unknown",
                       "2001:db8::1", "::ffff:172.16.0.4", " 10.0.0.5", "10.0.0.6 ", "", "-"])
xff_line = st.tuples(st.sampled_from(["172.16.0.7", "10.0.0.8", "junk", "::ffff:10.0.0.9"]),
                     st.one_of(st.just("-"), st.lists(hop, min_size=1, max_size=6).map(", ".join),
                               st.lists(hop, min_size=1, max_size=3).map(",".join)),
                     st.sampled_from(['"', '" ', '"\r', ""]))


@settings(max_examples=300, deadline=None)
@given(st.lists(xff_line, min_size=1, max_size=20),
       st.sampled_from(["xff", "xff:172.16.0.0/24", "xff:172.16.0.0/24,10.0.0.8/32"]))
def test_vectorized_xff_matches_the_per_line_walk(lines: list[tuple[str, str, str]],
                                                  spec: str) -> None:
    from panstream.inputs.extractors import ForwardedFor

    text = [f'{peer} - - [x] "GET / HTTP/1.1" 200 1 "-" "ua" "{value}{end}'
            for peer, value, end in lines]
    data = "\n".join(text).encode() + b"\n"
    r = run(data, spec, ANY4)
    ref = ForwardedFor(spec.partition(":")[2], 4096)
    want = []
    for t in text:
        tok = ref.token(t.encode().rstrip(b"\r"))
        with contextlib.suppress(ValueError, AttributeError):
            want.append(str(ipaddress.IPv4Address(normalize_address(tok.strip()).decode())))
    assert addrs(r) == want


@pytest.mark.parametrize("name", ["alb", "elb", "envoy", "haproxy", "apache-error", "mapped"])
def test_a_hashed_ip_table_reads_ports_and_mapped_spellings_like_ipv4(name: str) -> None:
    """Issue 29's real ALB sample into ``hashed-ip:M`` was 100 % malformed: ``client:port`` reached
    the hash unreduced. Now every line with a client is accepted, and one address written with
    and without its port (or as ``::ffff:a.b.c.d``) is one cell."""
    s = generate(name, lines=400, distinct=100, seed=3)
    u = Universe.parse("hashed-ip:4096")
    r = LineParser(u, GENERATORS[name][1]).parse(s.data)
    v4 = LineParser(Universe.parse("ipv4:0.0.0.0/0"), GENERATORS[name][1]).parse(s.data)
    assert r.accepted == v4.accepted and r.malformed == v4.malformed
    one = u.indices([b"10.0.0.1"]).indices.tolist()
    assert LineParser(u, "plain").parse(b"10.0.0.1\n").indices.tolist() == one
    assert LineParser(u, "alb").parse(
        b"http 2026-11-24T10:00:00Z app/x 10.0.0.1:4242 10.1.0.1:80 0 0 0 200 200 0 1\n"
    ).indices.tolist() == one


@pytest.mark.parametrize(("name", "spec"), [
    ("COMBINED", "clf"), ("common", "clf"), ("VCOMBINED", "vhost"), ("vcommon", "vhost"),
    ("W3C", "w3c:c-ip"), ("CLOUDFRONT", "w3c:c-ip"), ("CADDY", "json:request.client_ip"),
    ("AWSALB", "alb"), ("TRAEFIKCLF", "clf"), ("CLOUDSTORAGE", "csv:c_ip"), ("AWSS3", "field:5"),
    ("SQUID", "squid"), ("haproxy", "haproxy"), ("Apache-Error", "apache-error"),
    ("nginx-error", "nginx-error"), ("pam", "pam"), ("sshd", "sshd"),
])
def test_goaccess_log_format_names_are_presets(name: str, spec: str) -> None:
    """GoAccess's ``--log-format`` names (any case) and the new presets: ``-f NAME`` is the row of
    docs/logs.md where GoAccess's ``%h`` (the client) sits."""
    assert parse_format(name).spec == spec


def test_goaccess_awselb_is_refused_with_both_layouts_named() -> None:
    with pytest.raises(ConfigurationError, match="-f alb .* -f elb"):
        parse_format("AWSELB")


def test_each_goaccess_preset_counts_its_published_shape() -> None:
    """The GoAccess spelling of a format counts its generated sample as the recipe's does."""
    for name, gen in (("COMBINED", "clf"), ("VCOMBINED", "vhost"), ("CLOUDFRONT", "cloudfront"),
                      ("AWSALB", "alb"), ("SQUID", "squid")):
        s = generate(gen, lines=500, distinct=200, seed=8)
        assert run(s.data, name).accepted == s.accepted, name


@pytest.mark.parametrize("data", [
    b"Jun 14 15:16:01 combo su(pam_unix)[1]: session opened for user news by (uid=0)\n" * 5,
    b"2026-11-24T10:00:00+00:00 web1 myapp[42]: user alice logged in from the office\n" * 5,
    b"alpha beta gamma\ndelta epsilon zeta\n",
    b'{"user": "alice", "action": "login"}\n' * 3,
])
def test_auto_says_no_known_format_fits_instead_of_guessing_clf(data: bytes) -> None:
    """Issue 29: syslog lines of an unknown program, free text and JSON without an address field
    are not "Apache/nginx common or combined log (-f clf)": detection says no known format fits
    and lists candidates; every line of such an input is malformed."""
    d = detect(data)
    assert not d.known and d.spec == "none" and "candidates:" in d.note and "clf" not in d.spec
    r = run(data, d.spec)
    assert r.accepted == 0 and r.malformed == len(data.strip().split(b"\n"))


@pytest.mark.parametrize("data", [b"alice\nbob\n", b"10.0.0.1\n", b"42\n43\n"])
def test_one_token_per_line_is_still_plain(data: bytes) -> None:
    """``plain`` takes any item (``hashed:M`` and ``range:N`` universes count IDs)."""
    assert detect(data).spec == "plain"


def test_the_no_format_note_names_candidates_without_counts() -> None:
    """The note is printed for a file: it names candidates in words, never how many lines matched
    (a count would move with any one line)."""
    lines = [f"Nov 24 10:00:00 h app[1]: peer {i % 250}.0.0.1 said hi".encode() for i in range(40)]
    d = detect(b"\n".join(lines) + b"\n")
    assert not d.known and "-f field:7 (an address in some of the first lines)" in d.note
    assert not any(ch.isdigit() for ch in d.note.replace("field:7", ""))
