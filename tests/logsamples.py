"""Synthetic logs in the published shapes of common formats (for tests, docs/logs.md and bench).

Every generator writes ``lines`` lines whose client addresses are drawn from a pool of ``distinct``
addresses in ``10.0.0.0/16``, with about 5 % of the lines from ``11.0.0.0/16`` (outside that
universe), and returns a :class:`Sample`: the bytes, the true number of distinct clients inside
the universe and the number of lines that carry one (what ``ingest --exact-counts`` must accept).
The shapes follow the formats' documentation: field order, separators (tabs, single spaces),
header lines (``#Fields:``, ``#separator``/``#fields``/``#close``, a CSV header), quoting, CRLF
where the format's usual producer writes it (CSV exports).

Synthetic data only, so it lives in the test tree, not in panstream/: NumPy's PCG64 draws the
addresses (never used for privacy). The bench scripts import it from here too.

>>> s = generate("alb", lines=3, distinct=2, seed=1)
>>> s.data.count(b"\\n"), s.data.split(b" ")[0]
(3, b'https')
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

UNIVERSE = "ipv4:10.0.0.0/16"
PROXIES = "172.16.0.0/24"  # the trusted proxies of the X-Forwarded-For sample


@dataclass(frozen=True)
class Sample:
    """A generated log: ``data``, the true distinct clients inside :data:`UNIVERSE` and the lines
    that carry a client inside it (``accepted``)."""

    data: bytes
    truth: int
    accepted: int


def _clients(lines: int, distinct: int, seed: int) -> tuple[list[str], int, int, list[int]]:
    rng = np.random.default_rng(seed)
    pool = (10 << 24) + rng.choice(1 << 16, size=distinct, replace=False)
    pick = rng.integers(0, distinct, size=lines)
    a = pool[pick]
    out = rng.random(lines) < 0.05
    a[out] = (11 << 24) + rng.integers(0, 1 << 16, size=int(out.sum()))
    text = [f"{x >> 24}.{x >> 16 & 255}.{x >> 8 & 255}.{x & 255}" for x in a.tolist()]
    truth = len(set(pick[~out].tolist()))
    ports = rng.integers(1024, 65536, size=lines).tolist()
    return text, truth, int((~out).sum()), ports


def _ts(i: int) -> str:
    return f"2026-11-24T10:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}123Z"


def _caddy(ips: list[str], ports: list[int]) -> bytes:
    out = []
    for i, (ip, port) in enumerate(zip(ips, ports, strict=True)):
        rec = {"level": "info", "ts": 1795600000.0 + i / 10, "logger": "http.log.access.log0",
               "msg": "handled request",
               "request": {"remote_ip": ip, "remote_port": str(port), "client_ip": ip,
                           "proto": "HTTP/2.0", "method": "GET", "host": "example.com",
                           "uri": f"/page/{i % 97}", "headers": {
                               "User-Agent": ["Mozilla/5.0 (X11; Linux x86_64) Firefox/132.0"],
                               "Accept": ["*/*"], "Accept-Encoding": ["gzip, br"]},
                           "tls": {"resumed": False, "version": 772, "cipher_suite": 4865,
                                   "proto": "h2", "server_name": "example.com"}},
               "bytes_read": 0, "user_id": "", "duration": 0.000718, "size": 5123,
               "status": 200, "resp_headers": {"Server": ["Caddy"],
                                               "Content-Type": ["text/html; charset=utf-8"]}}
        out.append(json.dumps(rec, separators=(",", ":")))
    return ("\n".join(out) + "\n").encode()


def _gcp(ips: list[str], ports: list[int]) -> bytes:
    out = []
    for i, ip in enumerate(ips):
        rec = {"httpRequest": {"requestMethod": "GET", "requestUrl": f"https://example.com/{i % 89}",
                               "requestSize": "312", "status": 200, "responseSize": "5123",
                               "userAgent": "Mozilla/5.0", "remoteIp": ip,
                               "serverIp": "10.128.0.2", "latency": "0.012345s",
                               "protocol": "HTTP/1.1"},
               "insertId": f"{i:012x}", "jsonPayload": {
                   "@type": "type.googleapis.com/google.cloud.loadbalancing.type.LoadBalancerLogEntry",
                   "statusDetails": "response_sent_by_backend"},
               "logName": "projects/demo/logs/requests",
               "resource": {"type": "http_load_balancer", "labels": {"project_id": "demo"}},
               "severity": "INFO", "timestamp": _ts(i), "receiveTimestamp": _ts(i)}
        out.append(json.dumps(rec))  # the ", " and ": " spacing of Python's default dump
    return ("\n".join(out) + "\n").encode()


def _envoy(ips: list[str], ports: list[int]) -> bytes:
    out = []
    for i, (ip, port) in enumerate(zip(ips, ports, strict=True)):
        rec = {"start_time": _ts(i), "method": "GET", "path": f"/api/{i % 13}",
               "protocol": "HTTP/1.1", "response_code": 200, "response_flags": "-",
               "bytes_received": 0, "bytes_sent": 612, "duration": 3,
               "upstream_service_time": "2", "x_forwarded_for": None,
               "user_agent": "curl/8.5.0", "request_id": f"{i:08x}-1c2d-4e5f-8a9b-0c1d2e3f4a5b",
               "authority": "example.com", "upstream_host": "10.1.0.9:8080",
               "downstream_remote_address": f"{ip}:{port}"}
        out.append(json.dumps(rec, separators=(",", ":")))
    return ("\n".join(out) + "\n").encode()


def _alb(ips: list[str], ports: list[int]) -> bytes:
    return "".join(
        f'https {_ts(i)} app/my-loadbalancer/50dc6c495c0c9188 {ip}:{port} 10.1.0.9:80 0.000 '
        f'0.001 0.000 200 200 34 366 "GET https://www.example.com:443/p/{i % 31} HTTP/1.1" '
        f'"curl/7.46.0" ECDHE-RSA-AES128-GCM-SHA256 TLSv1.2 arn:aws:elasticloadbalancing:'
        f'us-east-2:123456789012:targetgroup/my-targets/73e2d6bc24d8a067 '
        f'"Root=1-58337281-1d84f3d73c47ec4e58577259" "www.example.com" "arn:aws:acm:us-east-2:'
        f'123456789012:certificate/12345678-1234-1234-1234-123456789012" 1 {_ts(i)} "forward" '
        f'"-" "-" "10.1.0.9:80" "200" "-" "-" TID_1234abcd\n'
        for i, (ip, port) in enumerate(zip(ips, ports, strict=True))).encode()


def _elb(ips: list[str], ports: list[int]) -> bytes:
    return "".join(
        f'{_ts(i)} my-loadbalancer {ip}:{port} 10.1.0.9:80 0.000073 0.001048 0.000057 200 200 '
        f'0 29 "GET http://www.example.com:80/p/{i % 31} HTTP/1.1" "curl/7.38.0" - -\n'
        for i, (ip, port) in enumerate(zip(ips, ports, strict=True))).encode()


_CLOUDFRONT_FIELDS = (
    "date time x-edge-location sc-bytes c-ip cs-method cs(Host) cs-uri-stem sc-status cs(Referer) "
    "cs(User-Agent) cs-uri-query cs(Cookie) x-edge-result-type x-edge-request-id x-host-header "
    "cs-protocol cs-bytes time-taken x-forwarded-for ssl-protocol ssl-cipher "
    "x-edge-response-result-type cs-protocol-version fle-status fle-encrypted-fields c-port "
    "time-to-first-byte x-edge-detailed-result-type sc-content-type sc-content-len "
    "sc-range-start sc-range-end")


def _cloudfront(ips: list[str], ports: list[int]) -> bytes:
    head = f"#Version: 1.0\n#Fields: {_CLOUDFRONT_FIELDS}\n"
    half = len(ips) // 2
    parts = []
    for lo, hi in ((0, half), (half, len(ips))):  # two log files concatenated: two headers
        rows = [
            "\t".join(["2026-11-24", f"10:{i // 60 % 60:02d}:{i % 60:02d}", "LAX50-C1", "392", ip,
                       "GET", "d111111abcdef8.cloudfront.net", f"/p/{i % 31}", "200", "-",
                       "Mozilla/5.0%20(X11;%20Linux%20x86_64)", "-", "-", "Hit",
                       "SOX4xwn4XV6Q4rgb7XiVGOHms_BGlTAC4KyHmureZmBNrjGdRLiNIQ==",
                       "d111111abcdef8.cloudfront.net", "https", "23", "0.001", "-", "TLSv1.3",
                       "TLS_AES_128_GCM_SHA256", "Hit", "HTTP/2.0", "-", "-", str(port), "0.001",
                       "Hit", "text/html", "78", "-", "-"])
            for i, (ip, port) in enumerate(zip(ips[lo:hi], ports[lo:hi], strict=True), lo)]
        parts.append(head + "\n".join(rows) + "\n")
    return "".join(parts).encode()


_ZEEK_FIELDS = str.split("ts uid id.orig_h id.orig_p id.resp_h id.resp_p proto service duration "
                         "orig_bytes resp_bytes conn_state local_orig local_resp missed_bytes "
                         "history orig_pkts orig_ip_bytes resp_pkts resp_ip_bytes tunnel_parents")
_ZEEK_TYPES = str.split("time string addr port addr port enum string interval count count string "
                        "bool bool count string count count count count set[string]")


def _zeek(ips: list[str], ports: list[int]) -> bytes:
    def header(opened: str) -> str:
        return ("#separator \\x09\n#set_separator\t,\n#empty_field\t(empty)\n#unset_field\t-\n"
                f"#path\tconn\n#open\t{opened}\n#fields\t" + "\t".join(_ZEEK_FIELDS) + "\n"
                "#types\t" + "\t".join(_ZEEK_TYPES) + "\n")

    half = len(ips) // 2
    parts = []
    for k, (lo, hi) in enumerate(((0, half), (half, len(ips)))):  # a rotated log, concatenated
        rows = ["\t".join([f"{1795600000 + i}.{i % 1000000:06d}", f"C{i:017x}", ip, str(port),
                           "10.1.0.9", "443", "tcp", "ssl", "0.512", "517", "4312", "SF", "-", "-",
                           "0", "ShADadFf", "12", "1141", "10", "4844", "-"])
                for i, (ip, port) in enumerate(zip(ips[lo:hi], ports[lo:hi], strict=True), lo)]
        parts.append(header(f"2026-11-24-1{k}-00-00") + "\n".join(rows) + "\n"
                     f"#close\t2026-11-24-1{k}-59-59\n")
    return "".join(parts).encode()


def _csv(ips: list[str], ports: list[int]) -> bytes:
    rows = ["timestamp,src_addr,dst_addr,src_port,dst_port,protocol,packets,bytes,action"]
    rows += [f"{_ts(i)},{ip},10.1.0.9,{port},443,TCP,12,{1000 + i % 500},ACCEPT"
             if i % 10 else f'"{_ts(i)}","{ip}","10.1.0.9",{port},443,"TCP",12,1000,"ACCEPT"'
             for i, (ip, port) in enumerate(zip(ips, ports, strict=True))]
    return ("\r\n".join(rows) + "\r\n").encode()  # exports from spreadsheets and Windows: CRLF


def _nfdump(ips: list[str], ports: list[int]) -> bytes:
    rows = ["ts,te,td,sa,da,sp,dp,pr,flg,fwd,stos,ipkt,ibyt,opkt,obyt,in,out,sas,das,smk,dmk,"
            "dtos,dir,nh,nhb,svln,dvln,ismc,odmc,idmc,osmc,mpls1,mpls2,mpls3,mpls4,mpls5,mpls6,"
            "mpls7,mpls8,mpls9,mpls10,cl,sl,al,ra,eng,exid,tr"]
    rows += [f"2026-11-24 10:{i // 60 % 60:02d}:{i % 60:02d},2026-11-24 10:{i // 60 % 60:02d}:"
             f"{i % 60:02d},0.512,{ip},10.1.0.9,{port},443,TCP,.AP.SF,0,0,12,1141,0,0,1,2,0,0,0,0,"
             "0,0,0.0.0.0,0.0.0.0,0,0,00:00:00:00:00:00,00:00:00:00:00:00,00:00:00:00:00:00,"
             "00:00:00:00:00:00,0-0-0,0-0-0,0-0-0,0-0-0,0-0-0,0-0-0,0-0-0,0-0-0,0-0-0,0-0-0,0.000,"
             "0.000,0.000,0.0.0.0,0/0,1,1970-01-01 00:00:00.000"
             for i, (ip, port) in enumerate(zip(ips, ports, strict=True))]
    rows += ["Summary", "flows,bytes,packets,avg_bps,avg_pps,avg_bpp", "1,2,3,4,5,6"]
    return ("\n".join(rows) + "\n").encode()


def _sshd(ips: list[str], ports: list[int]) -> bytes:
    out = []
    for i, (ip, port) in enumerate(zip(ips, ports, strict=True)):
        t = f"Nov 24 10:{i // 60 % 60:02d}:{i % 60:02d} web1"
        pid = 2000 + i % 500
        kind = i % 5
        if kind == 0:
            out.append(f"{t} sshd[{pid}]: Failed password for invalid user admin from {ip} port "
                       f"{port} ssh2")
        elif kind == 1:
            out.append(f"{t} sshd[{pid}]: Failed password for root from {ip} port {port} ssh2")
        elif kind == 2:
            out.append(f"{t} sshd[{pid}]: Accepted publickey for alice from {ip} port {port} ssh2: "
                       "ED25519 SHA256:Xb7YpYv2cOcdFj0Ua0n2xq0G3bHf4Z1mWc9Lk8sTqQ")
        elif kind == 3:
            out.append(f"{t} sshd[{pid}]: Failed password for invalid user  from {ip} port {port} "
                       "ssh2")  # an empty user name
        else:
            out.append(f"{t} sshd[{pid}]: Failed publickey for git from {ip} port {port} ssh2: "
                       "RSA SHA256:abc")
        if i % 3 == 0:  # lines that carry no login attempt
            out.append(f"{t} CRON[{pid + 7}]: pam_unix(cron:session): session opened for user root"
                       "(uid=0) by (uid=0)")
            out.append(f"{t} sshd[{pid}]: pam_unix(sshd:session): session closed for user alice")
    return ("\n".join(out) + "\n").encode()


def _xff(ips: list[str], ports: list[int]) -> bytes:
    """nginx ``log_format main`` with ``"$http_x_forwarded_for"`` last, behind two proxies in
    :data:`PROXIES`; one line in 20 carries a forged first hop (an address the client made up),
    one in 10 comes straight to nginx (no header)."""
    out = []
    for i, (ip, port) in enumerate(zip(ips, ports, strict=True)):
        p1, p2 = f"172.16.0.{1 + i % 7}", f"172.16.0.{100 + i % 3}"
        if i % 10 == 9:
            peer, xff = ip, "-"
        else:
            forged = f"10.0.{(port >> 8) & 255}.{port & 255}, " if i % 20 == 3 else ""
            peer, xff = p2, f"{forged}{ip}, {p1}"
        out.append(_access_line(i, peer, f' "{xff}"'))
    return "".join(out).encode()


def _access_line(i: int, client: str, tail: str = "") -> str:
    """The ``i``-th line of the combined log format (Apache's and nginx's default), its client
    field ``client``, ``tail`` appended (a custom format's extra fields)."""
    return (f'{client} - - [24/Nov/2026:10:{i // 60 % 60:02d}:{i % 60:02d} +0000] '
            f'"GET /p/{i % 31} HTTP/1.1" 200 612 "-" "Mozilla/5.0 (X11; Linux x86_64)"{tail}\n')


def _vhost(ips: list[str], ports: list[int]) -> bytes:
    return "".join(_access_line(i, f"www.example.com:443 {ip}") for i, ip in enumerate(ips)).encode()


def _mapped(ips: list[str], ports: list[int]) -> bytes:
    """nginx listening on ``[::]``: IPv4 clients logged as ``::ffff:a.b.c.d``."""
    return "".join(_access_line(i, f"::ffff:{ip}") for i, ip in enumerate(ips)).encode()


def _clf(ips: list[str], ports: list[int]) -> bytes:
    return "".join(_access_line(i, ip) for i, ip in enumerate(ips)).encode()


def _iptables(ips: list[str], ports: list[int]) -> bytes:
    """Linux netfilter LOG lines in syslog (``kern.log``), with the rule's ``--log-prefix``."""
    return "".join(
        f"Nov 24 10:{i // 60 % 60:02d}:{i % 60:02d} fw1 kernel: [{1000 + i}.{i % 1000:06d}] "
        f"DROP-IN: IN=eth0 OUT= MAC=52:54:00:12:34:56:52:54:00:65:43:21:08:00 SRC={ip} "
        f"DST=10.1.0.9 LEN=60 TOS=0x00 PREC=0x00 TTL=52 ID={i % 65536} DF PROTO=TCP SPT={port} "
        f"DPT=22 WINDOW=64240 RES=0x00 SYN URGP=0\n"
        for i, (ip, port) in enumerate(zip(ips, ports, strict=True))).encode()


_MON = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _haproxy(ips: list[str], ports: list[int]) -> bytes:
    """HAProxy's http log format through syslog (``option httplog``), a tcp log line every 7th
    request, and the start-up and health-check lines a real haproxy.log carries (no client)."""
    out = []
    for i, (ip, port) in enumerate(zip(ips, ports, strict=True)):
        t = f"10:{i // 60 % 60:02d}:{i % 60:02d}"
        head = f"Nov 24 {t} lb1 haproxy[4242]: {ip}:{port} [24/Nov/2026:{t}.{i % 1000:03d}]"
        if i % 7 == 3:
            out.append(f"{head} fe_tcp be_db/db1 0/0/{i % 9} 212 -- 3/3/1/1/0 0/0")
        else:
            out.append(f"{head} fe_http~ be_app/app{i % 3} 0/0/1/{i % 40}/{i % 40 + 2} 200 "
                       f"{512 + i % 977} - - ---- 6/6/0/0/0 0/0 \"GET /p/{i % 31} HTTP/1.1\"")
        if i % 250 == 0:
            out.append(f"Nov 24 {t} lb1 haproxy[4242]: Server be_app/app2 is UP, reason: Layer4 "
                       "check passed, check duration: 0ms. 3 active and 0 backup servers online.")
    return ("\n".join(out) + "\n").encode()


def _squid(ips: list[str], ports: list[int]) -> bytes:
    """Squid's native access.log (``logformat squid``): the elapsed time right-aligned in 6
    columns, the client third."""
    return "".join(
        f"{1764000000 + i}.{i % 1000:03d} {i % 9000:>6} {ip} "
        f"{('TCP_MISS', 'TCP_HIT', 'TCP_TUNNEL')[i % 3]}/{(200, 304, 200)[i % 3]} {300 + i % 5000} "
        f"{('GET', 'GET', 'CONNECT')[i % 3]} http://example.com/p/{i % 31} - "
        f"HIER_DIRECT/93.184.216.34 text/html\n"
        for i, ip in enumerate(ips)).encode()


def _apache_error(ips: list[str], ports: list[int]) -> bytes:
    """Apache 2.4's error log (``[client ADDR:PORT]``) with the server's own lines in between."""
    out = []
    for i, (ip, port) in enumerate(zip(ips, ports, strict=True)):
        t = f"[Tue Nov 24 10:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}123 2026]"
        out.append(f"{t} [core:error] [pid {3000 + i % 50}:tid 1400{i % 97}] [client {ip}:{port}] "
                   f"AH00128: File does not exist: /var/www/html/p{i % 31}.php")
        if i % 4 == 0:
            out.append(f"{t} [mpm_event:notice] [pid 2999:tid 1400] AH00489: Apache/2.4.58 "
                       "(Ubuntu) configured -- resuming normal operations")
    return ("\n".join(out) + "\n").encode()


def _nginx_error(ips: list[str], ports: list[int]) -> bytes:
    """nginx's error log: ``..., client: ADDR, server: NAME, request: ...``."""
    out = []
    for i, ip in enumerate(ips):
        t = f"2026/11/24 10:{i // 60 % 60:02d}:{i % 60:02d}"
        out.append(f'{t} [error] {1200 + i % 4}#{i % 4}: *{i + 1} open() "/usr/share/nginx/html/'
                   f'p{i % 31}" failed (2: No such file or directory), client: {ip}, server: '
                   f'example.com, request: "GET /p{i % 31} HTTP/1.1", host: "example.com"')
        if i % 5 == 0:
            out.append(f"{t} [notice] 1199#1199: signal process started")
    return ("\n".join(out) + "\n").encode()


def _pam(ips: list[str], ports: list[int]) -> bytes:
    """pam_unix's ``authentication failure; ... rhost=ADDR`` lines in a syslog auth log, between
    lines that name no remote host (an empty ``rhost=`` is a local login)."""
    out = []
    for i, ip in enumerate(ips):
        t = f"Nov 24 10:{i // 60 % 60:02d}:{i % 60:02d} web1"
        user = ("  user=root", "", "  user=alice")[i % 3]
        svc = ("sshd", "vsftpd", "dovecot")[i % 3]
        out.append(f"{t} {svc}[{2000 + i % 500}]: pam_unix({svc}:auth): authentication failure; "
                   f"logname= uid=0 euid=0 tty={svc} ruser= rhost={ip}{user}")
        if i % 3 == 0:
            out.append(f"{t} su[{3000 + i % 500}]: pam_unix(su:auth): authentication failure; "
                       "logname=bob uid=1000 euid=0 tty=/dev/pts/0 ruser=bob rhost=  user=root")
            out.append(f"{t} CRON[{4000 + i % 500}]: pam_unix(cron:session): session closed for "
                       "user root")
    return ("\n".join(out) + "\n").encode()


def _plain(ips: list[str], ports: list[int]) -> bytes:
    return ("\n".join(ips) + "\n").encode()


#: Generators by name; the ``-f`` value each recipe in docs/logs.md uses.
GENERATORS: dict[str, tuple[Callable[[list[str], list[int]], bytes], str]] = {
    "plain": (_plain, "plain"),
    "clf": (_clf, "clf"),
    "caddy": (_caddy, "json:request.remote_ip"),
    "gcp": (_gcp, "json:httpRequest.remoteIp"),
    "envoy": (_envoy, "json:downstream_remote_address"),
    "alb": (_alb, "alb"),
    "elb": (_elb, "elb"),
    "cloudfront": (_cloudfront, "w3c:c-ip"),
    "zeek": (_zeek, "zeek:id.orig_h"),
    "csv": (_csv, "csv:src_addr"),
    "nfdump": (_nfdump, "csv:sa"),
    "sshd": (_sshd, "sshd"),
    "xff": (_xff, f"xff:{PROXIES}"),
    "vhost": (_vhost, "vhost"),
    "mapped": (_mapped, "clf"),
    "iptables": (_iptables, r"regex:SRC=(?P<ip>\S+)"),
    "haproxy": (_haproxy, "haproxy"),
    "squid": (_squid, "squid"),
    "apache-error": (_apache_error, "apache-error"),
    "nginx-error": (_nginx_error, "nginx-error"),
    "pam": (_pam, "pam"),
}


def generate(name: str, lines: int = 2000, distinct: int = 1000, seed: int = 1) -> Sample:
    """A log of ``lines`` requests in the shape ``name`` (a key of :data:`GENERATORS`)."""
    ips, truth, accepted, ports = _clients(lines, distinct, seed)
    return Sample(GENERATORS[name][0](ips, ports), truth, accepted)


def reallogs() -> Path:
    """The real third-party logs with their truths (``../shared/reallogs``, its SOURCES.md; or
    ``$PANSTREAM_REALLOGS``); the test is skipped where they are not."""
    import pytest

    repo = Path(__file__).resolve().parents[1]
    env = os.environ.get("PANSTREAM_REALLOGS")
    for d in ([Path(env)] if env else []) + [repo.parent / "shared" / "reallogs",
                                             repo.parent.parent / "shared" / "reallogs"]:
        if (d / "SOURCES.md").exists():
            return d
    pytest.skip("the real logs of ../shared/reallogs are not here")
