"""The sandbox over real sockets and a real child process (no Twisted needed)."""

from __future__ import annotations

import base64
import email.utils
import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from scrapy_polite.sandbox import (
    SCENARIOS,
    FailureSpec,
    ProxyConfig,
    Sandbox,
    SandboxConfig,
    SandboxError,
    SiteConfig,
    read_access_log,
)

# The sandbox is plain asyncio: its tests run once, in the current environment.
pytestmark = pytest.mark.once

ROOT = str(Path(__file__).resolve().parents[1])
LOG_FIELDS = {
    "t_start",
    "t_end",
    "site",
    "ip",
    "method",
    "path",
    "status",
    "inflight_ip",
    "inflight_host",
    "sid",
    "user",
    "challenge",
    "blocked",
    "refusal",
    "inside_retry_after",
}


def _conn(proxy_url: str, timeout: float = 5.0) -> tuple[http.client.HTTPConnection, dict[str, str]]:
    p = urlsplit(proxy_url)
    headers = {}
    if p.username is not None:
        token = base64.b64encode(f"{p.username}:{p.password}".encode()).decode()
        headers["Proxy-Authorization"] = f"Basic {token}"
    return http.client.HTTPConnection(p.hostname, p.port, timeout=timeout), headers


def via(
    proxy_url: str | None,
    url: str,
    headers: dict[str, str] | None = None,
    timeout: float = 5.0,
    conn: http.client.HTTPConnection | None = None,
) -> tuple[int, http.client.HTTPMessage, bytes]:
    """GET *url* through *proxy_url* (absolute-URI form), or directly if ``None``."""
    hdrs = dict(headers or {})
    if proxy_url is None:
        u = urlsplit(url)
        c = conn or http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        target = u.path + (f"?{u.query}" if u.query else "")
    else:
        c, auth = _conn(proxy_url, timeout)
        c = conn or c
        hdrs.update(auth)
        target = url
    c.request("GET", target, headers=hdrs)
    r = c.getresponse()
    body = r.read()
    if conn is None:
        c.close()
    return r.status, r.headers, body


def _connect_tunnel(proxy_url: str, target: str, extra: str = "") -> tuple[socket.socket, bytes]:
    p = urlsplit(proxy_url)
    s = socket.create_connection((p.hostname, p.port), timeout=5)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{extra}\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            break
        head += chunk
    return s, head


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    ra_sites = [
        SiteConfig(
            name=f"ra-{form}", per_ip_rate=0.2, retry_after=3, retry_after_form=form, strikes_to_block=None
        )
        for form in ("seconds", "date", "garbage", "none")
    ]
    cfg = SandboxConfig(
        sites=[
            SiteConfig(name="free"),
            *ra_sites,
            SiteConfig(
                name="bucket", per_ip_rate=5.0, per_ip_burst=2, retry_after=0.3, strikes_to_block=None
            ),
            SiteConfig(
                name="inflight",
                per_ip_max_inflight=1,
                latency=[0.6, 0.6],
                retry_after=1,
                strikes_to_block=None,
            ),
            SiteConfig(name="strikes", per_ip_rate=0.2, retry_after=1, strikes_to_block=2),
            SiteConfig(name="host", host_rate=1.0, host_burst=1, retry_after=1),
            SiteConfig(name="nginx", host_rate=0.5, host_burst=1, retry_after=1, latency=[0.5, 0.5],
                       refuse_at_once=True, strikes_to_block=None),
            SiteConfig(name="upstream", host_rate=0.5, host_burst=1, retry_after=1, latency=[0.5, 0.5],
                       strikes_to_block=None),
            SiteConfig(name="login"),
            SiteConfig(name="s503", per_ip_rate=0.2, rate_limited_status=503, strikes_to_block=None),
            SiteConfig(name="robots", per_ip_rate=0.01, robots_crawl_delay=2, strikes_to_block=None),
            SiteConfig(name="tls", tls=True),
            SiteConfig(name="sched", host_rate_schedule=[[0, 1000.0], [1.0, 0.001]], strikes_to_block=None),
        ],
        proxies=ProxyConfig(count=6, gateway=True, gateway_pool=8),
        max_runtime=120,
    )
    box = Sandbox(cfg, workdir=tmp_path_factory.mktemp("sb"))
    with box:
        yield box
    assert box.proc is not None and box.proc.returncode is not None


@pytest.fixture(scope="module")
def sb_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    cfg = SandboxConfig(
        sites=[SiteConfig(name="a")],
        proxies=ProxyConfig(count=2, auth=("alice", "s3cret"), proxy_rate=0.2, gateway=True, gateway_pool=4),
        max_runtime=120,
    )
    with Sandbox(cfg, workdir=tmp_path_factory.mktemp("auth")) as box:
        yield box


@pytest.fixture(scope="module")
def sb_fail(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    cfg = SandboxConfig(
        sites=[SiteConfig(name="a")],
        proxies=ProxyConfig(count=4, gateway=False),
        failures=[FailureSpec(proxy=3, mode="refuse", at=0.0)],
        max_runtime=120,
    )
    with Sandbox(cfg, workdir=tmp_path_factory.mktemp("fail")) as box:
        yield box


# -- config and conventions ---------------------------------------------------


def test_config_round_trip_and_scenarios() -> None:
    cfg = SandboxConfig(
        sites=[SiteConfig(name="a", host_rate_schedule=[[10, 2], [0, 6]], latency=[0.01, 0.02])],
        proxies=ProxyConfig(auth=("u", "p"), proxy_rate=3.0),
        failures=[FailureSpec(proxy=1, mode="hang", at=2.5)],
    )
    again = SandboxConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    assert again.sites[0].host_rate_schedule == [[0.0, 6.0], [10.0, 2.0]]
    assert set(SCENARIOS) == {"unlimited", "per-ip", "host-cap", "shifting", "gateway", "multi-host", "ladder", "demo"}
    for make in SCENARIOS.values():
        built = make()
        assert SandboxConfig.from_dict(json.loads(json.dumps(built.to_dict()))) == built
    with pytest.raises(ValueError):
        SiteConfig(name="x", retry_after_form="sometime")
    with pytest.raises(ValueError):
        SandboxConfig.from_dict({"sites": [{"name": "a", "bogus": 1}]})


def test_ready_conventions(sb: Sandbox) -> None:
    assert re.fullmatch(r"http://127\.0\.1\.1:\d+", sb.site_url("free"))
    assert sb.site_url("ra-seconds").startswith("http://127.0.1.2:")
    assert sb.site_url("tls").startswith("https://")
    assert len(sb.proxy_urls) == 6
    assert all(re.fullmatch(r"http://127\.0\.0\.1:\d+", u) for u in sb.proxy_urls)
    assert sb.proxy_exit_ips == [f"127.0.0.{10 + i}" for i in range(6)]
    assert sb.gateway_template is not None and "user-session-{session}:pass@127.0.0.1:" in sb.gateway_template
    assert sb.gateway_url is not None and sb.gateway_url.startswith("http://user:pass@127.0.0.1:")
    assert sb.health()["ok"] is True


def test_catalogue_links_reach_every_item(sb: Sandbox) -> None:
    base = sb.site_url("free")
    u = urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=5)
    seen: set[str] = set()
    todo = ["/"]
    items: set[int] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        status, headers, body = via(None, base + path, conn=conn)
        assert status == 200 and headers["X-Sandbox-Site"] == "free"
        html = body.decode()
        m = re.search(r'<span class="id">(\d+)</span>', html)
        if m:
            items.add(int(m.group(1)))
        todo.extend(re.findall(r'href="([^"]+)"', html))
    conn.close()
    assert items == set(range(1, 101))
    assert via(None, base + "/item/101")[0] == 404
    assert via(None, base + "/item/0")[0] == 404
    assert via(None, base + "/status/418")[0] == 418
    status, _, body = via(None, base + "/robots.txt")
    assert status == 200 and b"Allow: /" in body


# -- exit IPs -------------------------------------------------------------------


def test_each_proxy_has_its_own_exit_ip(sb: Sandbox) -> None:
    for proxy, exit_ip in zip(sb.proxy_urls, sb.proxy_exit_ips):
        status, headers, body = via(proxy, sb.site_url("free") + "/ip")
        assert status == 200
        assert json.loads(body) == {"ip": exit_ip}
        assert headers["X-Proxy-Exit-IP"] == exit_ip
        assert headers["X-Sandbox-Peer-IP"] == exit_ip
    ips = {r["ip"] for r in sb.log() if r["site"] == "free" and r["path"] == "/ip"}
    assert set(sb.proxy_exit_ips) <= ips


def test_proxy_keep_alive(sb: Sandbox) -> None:
    conn, _ = _conn(sb.proxy_urls[5])
    for n in (1, 2, 3):
        status, _, body = via(sb.proxy_urls[5], sb.site_url("free") + f"/item/{n}", conn=conn)
        assert status == 200 and f"<h1>Item {n}</h1>".encode() in body
    conn.close()


# -- per-IP limits ----------------------------------------------------------------


@pytest.mark.parametrize("form", ["seconds", "date", "garbage", "none"])
def test_per_ip_bucket_retry_after_forms(sb: Sandbox, form: str) -> None:
    url = sb.site_url(f"ra-{form}") + "/item/1"
    proxy = sb.proxy_urls[0]
    assert via(proxy, url)[0] == 200
    status, headers, _ = via(proxy, url)
    assert status == 429
    value = headers.get("Retry-After")
    if form == "seconds":
        assert value == "3"
    elif form == "date":
        when = email.utils.parsedate_to_datetime(value).timestamp()
        assert 1.0 <= when - time.time() <= 4.5
    elif form == "garbage":
        assert value == "soon"
    else:
        assert value is None
    assert via(sb.proxy_urls[1], url)[0] == 200


def test_per_ip_bucket_refills(sb: Sandbox) -> None:
    url = sb.site_url("bucket") + "/item/2"
    proxy = sb.proxy_urls[0]
    assert [via(proxy, url)[0] for _ in range(3)] == [200, 200, 429]
    time.sleep(0.5)
    assert via(proxy, url)[0] == 200


def test_per_ip_inflight_cap(sb: Sandbox) -> None:
    url = sb.site_url("inflight") + "/item/3"
    results: list[int] = []

    def fetch(proxy: str) -> None:
        results.append(via(proxy, url)[0])

    threads = [threading.Thread(target=fetch, args=(sb.proxy_urls[i],)) for i in (2, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(results) == [200, 200, 429]
    recs = [r for r in sb.log() if r["site"] == "inflight"]
    limited = [r for r in recs if r["status"] == 429]
    assert len(limited) == 1 and limited[0]["inflight_ip"] == 2 and limited[0]["ip"] == sb.proxy_exit_ips[2]
    assert max(r["inflight_host"] for r in recs) == 3


def test_strikes_block_ip_for_rest_of_run(sb: Sandbox) -> None:
    url = sb.site_url("strikes") + "/item/4"
    bad, good = sb.proxy_urls[4], sb.proxy_urls[5]
    assert via(bad, url)[0] == 200
    assert via(bad, url)[0] == 429
    assert via(bad, url)[0] == 429
    assert via(bad, url)[0] == 403
    time.sleep(1.2)
    assert via(bad, url)[0] == 403
    assert via(bad, sb.site_url("strikes") + "/")[0] == 403
    assert via(good, url)[0] == 200
    state = sb.site_state("strikes")
    assert state["blocked"] == [sb.proxy_exit_ips[4]]
    assert via(bad, sb.site_url("free") + "/")[0] == 200


def test_rate_limited_status_503(sb: Sandbox) -> None:
    url = sb.site_url("s503") + "/"
    assert via(sb.proxy_urls[0], url)[0] == 200
    status, headers, _ = via(sb.proxy_urls[0], url)
    assert status == 503 and headers["Retry-After"] == "2"


def test_robots_crawl_delay_exempt_from_limits(sb: Sandbox) -> None:
    base, proxy = sb.site_url("robots"), sb.proxy_urls[1]
    for _ in range(3):
        status, _, body = via(proxy, base + "/robots.txt")
        assert status == 200 and b"Crawl-delay: 2" in body
    assert [via(proxy, base + "/item/1")[0] for _ in range(2)] == [200, 429]
    assert len([r for r in sb.log() if r["site"] == "robots" and r["path"] == "/robots.txt"]) == 3


# -- host-wide cap ---------------------------------------------------------------


def test_host_cap_and_runtime_change(sb: Sandbox) -> None:
    url = sb.site_url("host") + "/item/5"
    statuses = [via(sb.proxy_urls[i], url)[0] for i in range(4)]
    assert statuses[0] == 200 and statuses[1:] == [429, 429, 429]
    sb.set_host_rate("host", None)
    assert sb.site_state("host")["host_rate"] is None
    assert [via(sb.proxy_urls[i], url)[0] for i in range(4)] == [200] * 4
    sb.set_host_rate("host", 0.5)
    assert sb.site_state("host")["host_rate"] == 0.5
    time.sleep(0.1)
    statuses = [via(sb.proxy_urls[i], url)[0] for i in range(3)]
    assert statuses.count(429) >= 2


@pytest.mark.parametrize("site", ["nginx", "upstream"])
def test_refusals_answered_at_once_or_after_the_latency(sb: Sandbox, site: str) -> None:
    # nginx's limit_req refuses before it proxies: its 429 skips the upstream's latency.
    url = sb.site_url(site) + "/item/5"
    took = []
    for i in range(2):
        t0 = time.monotonic()
        took.append((via(sb.proxy_urls[i], url)[0], time.monotonic() - t0))
    assert [status for status, _ in took] == [200, 429]
    assert took[0][1] >= 0.5
    assert (took[1][1] < 0.4) == (site == "nginx"), took


def test_host_rate_schedule(sb: Sandbox) -> None:
    while sb.health()["uptime"] < 1.1:
        time.sleep(0.1)
    assert sb.site_state("sched")["host_rate"] == 0.001
    url = sb.site_url("sched") + "/"
    statuses = [via(sb.proxy_urls[i], url)[0] for i in range(3)]
    assert statuses.count(429) >= 2


# -- sessions -------------------------------------------------------------------


def test_login_binds_session_to_ip(sb: Sandbox) -> None:
    base = sb.site_url("login")
    p0, p1 = sb.proxy_urls[0], sb.proxy_urls[1]
    status, headers, body = via(p0, base + "/login?user=bob")
    assert status == 200
    sid = re.search(r"sid=([0-9a-f]+)", headers["Set-Cookie"]).group(1)
    cookie = {"Cookie": f"sid={sid}"}
    status, _, body = via(p0, base + "/account", cookie)
    assert status == 200 and b'<span class="user">bob</span>' in body
    assert via(p0, base + "/account/orders", cookie)[0] == 200
    assert via(p1, base + "/account", cookie)[0] == 409
    assert via(p0, base + "/account")[0] == 401
    assert via(p0, base + "/account", {"Cookie": "sid=nope"})[0] == 401
    recs = [r for r in sb.log() if r["site"] == "login" and r["sid"] == sid]
    assert {(r["path"], r["status"], r["user"]) for r in recs} >= {
        ("/account", 200, "bob"),
        ("/account/orders", 200, "bob"),
        ("/account", 409, "bob"),
    }


def test_gateway_sticky_sessions(sb: Sandbox) -> None:
    url = sb.site_url("free") + "/ip"
    seen: dict[str, str] = {}
    for sess in ("s1", "s2", "s3", "s4"):
        ips = set()
        for _ in range(3):
            status, headers, body = via(sb.gateway_proxy_url(sess), url)
            assert status == 200 and headers["X-Proxy-Session"] == sess
            ip = json.loads(body)["ip"]
            assert headers["X-Proxy-Exit-IP"] == ip
            ips.add(ip)
        assert len(ips) == 1
        seen[sess] = ips.pop()
    assert len(set(seen.values())) == 4
    assert all(ip.startswith("127.0.0.10") for ip in seen.values())
    assert sb.gateway_url is not None
    status, headers, body = via(sb.gateway_url, url)
    assert status == 200 and "X-Proxy-Session" not in headers
    pool = set(sb.info["gateway"]["pool"])
    assert json.loads(body)["ip"] in pool
    # A login made through one session stays valid through it and not through another.
    base = sb.site_url("login")
    _, headers, _ = via(sb.gateway_proxy_url("s1"), base + "/login?user=gw")
    cookie = {"Cookie": headers["Set-Cookie"].split(";")[0]}
    assert via(sb.gateway_proxy_url("s1"), base + "/account", cookie)[0] == 200
    assert via(sb.gateway_proxy_url("s2"), base + "/account", cookie)[0] == 409
    plog = [r for r in sb.proxy_log() if r["proxy"] == "gateway"]
    assert {r["session"] for r in plog} >= {"s1", "s2", "s3", "s4", None}


# -- proxy features -------------------------------------------------------------


def _get_ip_through(sock: socket.socket, netloc: str) -> bytes:
    """``GET /ip`` over an open tunnel, read to the end of the connection."""
    sock.sendall(f"GET /ip HTTP/1.1\r\nHost: {netloc}\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


def test_connect_tunnel(sb: Sandbox) -> None:
    site = urlsplit(sb.site_url("free"))
    s, head = _connect_tunnel(sb.proxy_urls[2], site.netloc)
    assert head.startswith(b"HTTP/1.1 200")
    assert f"X-Proxy-Exit-IP: {sb.proxy_exit_ips[2]}".encode() in head
    data = _get_ip_through(s, site.netloc)
    s.close()
    assert data.startswith(b"HTTP/1.1 200")
    assert json.loads(data.split(b"\r\n\r\n", 1)[1]) == {"ip": sb.proxy_exit_ips[2]}
    assert any(r["method"] == "CONNECT" and r["status"] == 200 for r in sb.proxy_log())


def test_connect_tunnel_tls(sb: Sandbox) -> None:
    site = urlsplit(sb.site_url("tls"))
    s, head = _connect_tunnel(sb.proxy_urls[3], site.netloc)
    assert head.startswith(b"HTTP/1.1 200")
    ctx = ssl.create_default_context(cafile=str(sb.workdir / "site-tls-cert.pem"))
    with ctx.wrap_socket(s, server_hostname=site.hostname) as tls:
        data = _get_ip_through(tls, site.netloc)
    assert json.loads(data.split(b"\r\n\r\n", 1)[1]) == {"ip": sb.proxy_exit_ips[3]}


def test_proxy_auth(sb_auth: Sandbox) -> None:
    url = sb_auth.site_url("a") + "/ip"
    p = urlsplit(sb_auth.proxy_urls[0])
    assert (p.username, p.password) == ("alice", "s3cret")
    bare = f"http://{p.hostname}:{p.port}"
    status, headers, _ = via(bare, url)
    assert status == 407 and headers["Proxy-Authenticate"] == 'Basic realm="sandbox"'
    assert via(f"http://alice:wrong@{p.hostname}:{p.port}", url)[0] == 407
    assert via(sb_auth.proxy_urls[0], url)[0] == 200
    s, head = _connect_tunnel(bare, urlsplit(sb_auth.site_url("a")).netloc)
    s.close()
    assert head.startswith(b"HTTP/1.1 407")
    template = sb_auth.gateway_template
    assert template is not None and template.startswith("http://alice-session-{session}:s3cret@")
    assert via(sb_auth.gateway_proxy_url("x1"), url)[0] == 200
    gw = urlsplit(template)
    assert via(f"http://alice-session-x1:bad@{gw.hostname}:{gw.port}", url)[0] == 407
    assert via(f"http://mallory-session-x1:s3cret@{gw.hostname}:{gw.port}", url)[0] == 407


def test_proxy_side_rate_limit(sb_auth: Sandbox) -> None:
    url = sb_auth.site_url("a") + "/item/1"
    proxy = sb_auth.proxy_urls[1]
    assert via(proxy, url)[0] == 200
    status, headers, _ = via(proxy, url)
    assert status == 429 and headers["X-Proxy-Error"] == "rate-limited"
    assert "X-Sandbox-Site" not in headers
    auth = base64.b64encode(b"alice:s3cret").decode()
    s, head = _connect_tunnel(
        proxy, urlsplit(sb_auth.site_url("a")).netloc, f"Proxy-Authorization: Basic {auth}\r\n"
    )
    s.close()
    assert head.startswith(b"HTTP/1.1 429") and b"X-Proxy-Error: rate-limited" in head
    exit_ip = sb_auth.proxy_exit_ips[1]
    assert len([r for r in sb_auth.log() if r["ip"] == exit_ip]) == 1


# -- failure modes ---------------------------------------------------------------


def _refused(proxy_url: str) -> bool:
    p = urlsplit(proxy_url)
    try:
        socket.create_connection((p.hostname, p.port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def _held(proxy_url: str) -> bool:
    """Whether another server (SO_REUSEADDR, as asyncio and Twisted bind) is kept off the proxy's port."""
    p = urlsplit(proxy_url)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((p.hostname, p.port))
        s.listen()
    except OSError:
        return True
    finally:
        s.close()
    return False


def test_refuse_and_recover(sb_fail: Sandbox) -> None:
    url = sb_fail.site_url("a") + "/ip"
    proxy = sb_fail.proxy_urls[0]
    assert via(proxy, url)[0] == 200
    sb_fail.fail_proxy(0, "refuse")
    assert _refused(proxy)
    assert _held(proxy)  # down, its port is not handed to another server that would answer for it
    sb_fail.recover_proxy(0)
    assert via(proxy, url)[0] == 200


def test_die_aborts_open_connections(sb_fail: Sandbox) -> None:
    url = sb_fail.site_url("a") + "/ip"
    proxy = sb_fail.proxy_urls[1]
    conn, _ = _conn(proxy)
    assert via(proxy, url, conn=conn)[0] == 200
    sb_fail.fail_proxy(1, "die")
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        via(proxy, url, conn=conn)
    conn.close()
    assert _refused(proxy)
    sb_fail.fail_proxy(1, "recover")
    assert via(proxy, url)[0] == 200


def test_hang_accepts_but_never_answers(sb_fail: Sandbox) -> None:
    url = sb_fail.site_url("a") + "/ip"
    proxy = sb_fail.proxy_urls[2]
    sb_fail.fail_proxy(2, "hang")
    assert not _refused(proxy)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        via(proxy, url, timeout=0.8)
    assert time.monotonic() - t0 >= 0.7
    sb_fail.fail_proxy(2, "recover")
    assert via(proxy, url)[0] == 200


def test_scheduled_failure(sb_fail: Sandbox) -> None:
    deadline = time.monotonic() + 3
    while not _refused(sb_fail.proxy_urls[3]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _refused(sb_fail.proxy_urls[3]) and _held(sb_fail.proxy_urls[3])


# -- logs -------------------------------------------------------------------------


def test_log_fields(sb: Sandbox) -> None:
    recs = sb.log()
    assert recs
    for r in recs:
        assert set(r) == LOG_FIELDS
        assert r["t_end"] >= r["t_start"] > 1e9
        assert (
            isinstance(r["status"], int) and r["inflight_ip"] >= 1 and r["inflight_host"] >= r["inflight_ip"]
        )
    assert {r["status"] for r in recs} >= {200, 403, 404, 409, 429}
    assert read_access_log(sb.access_log_path) == sb.log()
    for r in sb.proxy_log():
        assert set(r) == {"t", "proxy", "exit_ip", "method", "target", "status", "session"}


# -- process lifecycle -----------------------------------------------------------


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


def test_stop_is_idempotent_and_child_exits(tmp_path: Path) -> None:
    box = Sandbox(SandboxConfig(proxies=ProxyConfig(count=1, gateway=False)), workdir=tmp_path)
    box.start()
    pid = box.pid
    assert pid is not None and box.running
    box.stop()
    box.stop()
    assert not box.running and box.proc is not None and box.proc.returncode is not None
    assert _gone(pid, 1)


def test_child_exits_after_max_runtime(tmp_path: Path) -> None:
    cfg = SandboxConfig(proxies=ProxyConfig(count=1, gateway=False), max_runtime=0.5)
    with Sandbox(cfg, workdir=tmp_path) as box:
        assert box.proc is not None
        box.proc.wait(timeout=5)
        assert box.proc.returncode == 0


def test_child_exits_when_parent_dies(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os, sys
        from scrapy_polite.sandbox import Sandbox, SandboxConfig, ProxyConfig
        box = Sandbox(SandboxConfig(proxies=ProxyConfig(count=1, gateway=False)), workdir={str(tmp_path)!r}).start()
        print(box.pid, flush=True)
        os._exit(0)
        """
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=20, env=env, text=True)
    pid = int(out.stdout.strip())
    assert _gone(pid, 5)


def test_startup_failure_reports_child_stderr(tmp_path: Path) -> None:
    cfg = SandboxConfig(sites=[SiteConfig(name="a")])
    cfg.sites[0].retry_after_form = "sometime"
    with pytest.raises(SandboxError, match="retry_after_form"):
        Sandbox(cfg, workdir=tmp_path).start()


def test_cli_run_prints_urls_and_exits(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "scrapy_polite.sandbox",
            "run",
            "--scenario",
            "per-ip",
            "--duration",
            "1",
            "--workdir",
            str(tmp_path),
        ],
        capture_output=True,
        timeout=20,
        env=env,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(re.fullmatch(r"site a: http://127\.0\.1\.1:\d+", line) for line in lines)
    assert len([line for line in lines if re.fullmatch(r"http://127\.0\.0\.1:\d+", line)]) == 8
    assert any(line.startswith("gateway template: http://user-session-{session}:pass@") for line in lines)
