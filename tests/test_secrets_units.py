"""No credential in a config error, a repr or a published id, whatever the mistake (fault suite, units)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from scrapy.settings import Settings

from scrapy_polite.errors import PoliteConfigError
from scrapy_polite.gate.local import LocalGate
from scrapy_polite.gate.redis.state import endpoint_id, mask_url
from scrapy_polite.gate.state import EndpointState, Lease, SessionState
from scrapy_polite.pool.endpoints import expand, gateway_session_id, read_proxies_file
from scrapy_polite.settings.config import PoliteConfig

# These checks do not depend on Scrapy's version.
pytestmark = pytest.mark.once

PW = "Zq7sekr1tPW"
EXAMPLE = Path(__file__).resolve().parent.parent / "example_project"


def config(**settings: object) -> PoliteConfig:
    return PoliteConfig.from_settings(Settings(settings))


def config_error(**settings: object) -> PoliteConfigError:
    with pytest.raises(PoliteConfigError) as info:
        config(**settings)
    return info.value


def assert_clean(exc: PoliteConfigError, *secrets: str) -> None:
    for text in (str(exc), repr(exc), repr(exc.value), repr(exc.args)):
        for secret in secrets or (PW,):
            assert secret not in text, text


# -- config errors ------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        (f"http://user:{PW}@127.0.0.1:99999", "port number"),           # port out of range
        (f"http://user:{PW}@127.0.0.1:80a", "port number"),             # port not a number
        (f"user:{PW}@127.0.0.1:port", "port number"),                   # scheme-less, bad port
        (f"http://user:{PW}@:8000", "with a host"),                     # empty host
        (f"http://user:{PW}@[2001:db8::1:8000", "IPv6 host in brackets"),  # broken IPv6
        (f"http://user:{PW}@[2001:db8::1]:x", "port number"),
        (f"http://user:{PW}127.0.0.1:8000", "port number"),             # the '@' forgotten
        (f"http://user:{PW}:127.0.0.1:8000", "port number"),
        ("http://user:Zq7/sekr1tPW@127.0.0.1:8000", "percent-encode"),  # '/' in the password
        ("http://user:Zq7?sekr1tPW@127.0.0.1:8000", "percent-encode"),
    ],
)
def test_a_bad_proxy_url_error_shows_no_password(url: str, fragment: str) -> None:
    exc = config_error(POLITE_PROXIES=[url])
    assert fragment in str(exc) and exc.setting == "POLITE_PROXIES"
    assert_clean(exc, PW, "Zq7", "sekr1tPW")


def test_a_bad_dict_entry_error_shows_no_password() -> None:
    exc = config_error(POLITE_PROXIES=[{"url": f"http://user:{PW}@127.0.0.1:8000", "exit_ip": 7}])
    assert "'exit_ip' to be a string" in str(exc) and "127.0.0.1:8000" in str(exc)
    assert_clean(exc)


def test_scheme_less_user_pass_host_port_is_taken_as_http() -> None:
    cfg = config(POLITE_PROXIES=[f"user:{PW}@127.0.0.1:8000", f" user:{PW}@proxy.example:3128 "])
    assert [e.url for e in cfg.endpoints] == [f"http://user:{PW}@127.0.0.1:8000",
                                              f"http://user:{PW}@proxy.example:3128"]
    assert [e.label for e in cfg.endpoints] == ["http://127.0.0.1:8000", "http://proxy.example:3128"]


@pytest.mark.parametrize(
    "value",
    [
        f"http://user:{PW[:4]},{PW[4:]}@127.0.0.1:8000",                  # head fails as a URL
        f"http://user:{PW[:4]} {PW[4:]}@127.0.0.1:8000,http://127.0.0.1:8001",
        "http://user:1234 5678@127.0.0.1:8000",                         # head is a valid URL: the tail is caught
        "user:1234,5678@127.0.0.1:8000",
    ],
)
def test_a_password_cut_by_the_command_line_split_is_refused_without_echoing_a_piece(value: str) -> None:
    exc = config_error(POLITE_PROXIES=value)
    message = str(exc)
    assert "%2C" in message and "%20" in message and "piece" in message
    password = value.split("user:", 1)[1].rsplit("@", 1)[0]
    for piece in password.replace(",", " ").split():
        assert_clean(exc, piece)


def test_a_command_line_string_still_splits_and_takes_scheme_less_entries() -> None:
    cfg = config(POLITE_PROXIES=f"http://127.0.0.1:8001, user:{PW}@127.0.0.1:8002 http://u%2Cx:p%20w@127.0.0.1:8003")
    assert [e.label for e in cfg.endpoints] == [f"http://127.0.0.1:{p}" for p in (8001, 8002, 8003)]


def test_a_bad_line_in_the_proxies_file_shows_no_password(tmp_path: Path) -> None:
    path = tmp_path / "proxies.txt"
    path.write_text(f"http://user:{PW}@127.0.0.1:8000\nuser:{PW}@127.0.0.1:80x\n")
    exc = config_error(POLITE_PROXIES_FILE=str(path))
    assert exc.setting == "POLITE_PROXIES_FILE"
    assert_clean(exc)
    with pytest.raises(PoliteConfigError) as info:  # the path a reload takes
        expand(read_proxies_file(path), 2, "POLITE_PROXIES_FILE")
    assert_clean(info.value)


@pytest.mark.parametrize(
    "value",
    [f"http://user:{PW}@host:1", [f"http://user:{PW}@host:1"], {"url": f"user:{PW}@host:1"},
     f"redis://:{PW}@host/0", f"redis://host/0?db=1&password={PW}", f"user:{PW[:4]} {PW[4:]}@host:1"],
)
def test_the_error_itself_scrubs_what_a_call_site_did_not_mask(value: object) -> None:
    exc = PoliteConfigError("POLITE_X", value, "something else")
    assert str(exc).startswith("POLITE_X=") and "host" in str(exc)
    assert_clean(exc, PW, PW[:4], PW[4:])
    # A value without a credential is left as it is.
    exc = PoliteConfigError("POLITE_X", [1, "http://127.0.0.1:8000"], "something else")
    assert exc.value == [1, "http://127.0.0.1:8000"]
    assert str(exc) == "POLITE_X=[1, 'http://127.0.0.1:8000'] is invalid: expected something else"


@pytest.mark.parametrize("url", [f"redis://127.0.0.1:9/0?password={PW}",
                                 f"redis://default:{PW}@127.0.0.1:9/0?password={PW}&db=0"])
def test_redis_url_errors_show_no_password(url: str) -> None:
    exc = config_error(POLITE_PROXIES=["http://127.0.0.1:8000"], POLITE_STATE=url.replace("redis://", "redi://"))
    assert_clean(exc)
    from scrapy_polite.runtime import _build_gate

    with pytest.raises(PoliteConfigError) as info:  # unreachable: nothing listens on port 9
        _build_gate(config(POLITE_PROXIES=["http://127.0.0.1:8000"], POLITE_STATE=url))
    assert "reachable Redis" in str(info.value) and "127.0.0.1:9" in str(info.value)
    assert_clean(info.value)


def test_mask_url_masks_userinfo_and_password_parameters() -> None:
    assert mask_url(f"redis://:{PW}@h:6379/0") == "redis://:***@h:6379/0"
    assert mask_url(f"redis://app:{PW}@h:6379/0") == "redis://app:***@h:6379/0"
    assert mask_url(f"redis://h:6379/0?password={PW}&db=1") == "redis://h:6379/0?password=***&db=1"
    assert mask_url(f"rediss://h/0?db=1&Password={PW}") == "rediss://h/0?db=1&Password=***"
    assert mask_url(f"unix://:{PW}@/run/redis.sock?db=0") == "unix://:***@/run/redis.sock?db=0"
    assert PW not in mask_url(f"redis://:{PW}@[::1/0")
    assert mask_url("redis://h:6379/0") == "redis://h:6379/0"


def test_fleet_command_shows_no_password() -> None:
    url = f"redis://app:{PW}@127.0.0.1:9/0?password={PW}"
    proc = subprocess.run([sys.executable, "-m", "scrapy_polite", "fleet", url], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1 and "cannot read redis://app:***@127.0.0.1:9/0?password=***" in proc.stderr
    assert PW not in proc.stdout + proc.stderr


def test_polite_tune_config_error_shows_no_password() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPY_")}
    env["POLITE_PROXIES_FILE"] = ""
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "polite-tune", "catalogue", "-s",
         f"POLITE_PROXIES=http://user:{PW[:4]},{PW[4:]}@127.0.0.1:8000"],
        cwd=EXAMPLE, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0 and "percent-encode" in proc.stderr, proc.stderr
    assert PW[:4] not in proc.stdout + proc.stderr and PW[4:] not in proc.stdout + proc.stderr


# -- reprs ----------------------------------------------------------------------


def test_reprs_show_labels_not_urls() -> None:
    cfg = config(POLITE_PROXIES=[f"http://user:{PW}@127.0.0.1:8000", f"http://u-{{session}}:{PW}@127.0.0.1:9000"],
                 POLITE_GATEWAY_SESSIONS=2)
    gate = LocalGate(cfg.endpoints, host_concurrency=2, endpoint_concurrency=1, delay=(0.0, 0.0),
                     backoff=(1.0, 5.0), max_failures=3)
    ep = cfg.endpoints[0]
    lease = Lease(endpoint=ep, host="example.com", session="s1", granted_at=0.0, waited=0.0)
    meta = {"_polite_lease": lease, "proxy": ep.url, "polite_endpoint": ep.label}
    texts = [repr(ep), repr(cfg.endpoints[1]), repr(lease), repr(EndpointState(ep)), repr(meta),
             repr(SessionState("s1", endpoint_key=ep.key)), repr(gate.endpoints), repr(cfg)]
    for text in texts:
        assert PW not in text, text
    assert "http://127.0.0.1:8000" in repr(lease) and "session=" in repr(cfg.endpoints[1])
    # The URL itself is intact where it is used.
    assert meta["proxy"] == f"http://user:{PW}@127.0.0.1:8000" and f"{ep.url}".endswith("@127.0.0.1:8000")


# -- published ids ----------------------------------------------------------------


def published(proxies: list[str]) -> list[tuple[str, str, str | None]]:
    """What leaves the process for each endpoint: its label, its Redis id, its gateway session id."""
    endpoints, _ = expand(proxies, 3)
    return [(e.label, endpoint_id(e.ident), e.session_id) for e in endpoints]


def test_published_ids_do_not_depend_on_the_password() -> None:
    def pool(pw: str) -> list[str]:
        return [f"http://alice:{pw}@127.0.0.1:8000", f"http://bob:{pw}@127.0.0.1:8000",
                f"http://user-session-{{session}}:{pw}@127.0.0.1:9000"]

    ours, guessed = published(pool(PW)), published(pool("guess"))
    # A guess of the password cannot be checked against a label, a session id or a Redis id.
    assert ours == guessed
    assert gateway_session_id(f"http://u-{{session}}:{PW}@h:1", 0) == gateway_session_id("http://u-{session}:x@h:1", 0)
    assert len({label for label, _, _ in ours}) == len({ep_id for _, ep_id, _ in ours}) == len(ours) == 5
    assert ours[1][0].startswith("http://127.0.0.1:8000#")  # same host:port, other user: kept apart


def test_ids_are_stable_across_processes_and_keep_entries_apart() -> None:
    proxies = [f"http://alice:{PW}@127.0.0.1:8000", "http://alice:other@127.0.0.1:8000",
               f"http://user-session-{{session}}:{PW}@127.0.0.1:9000",
               "http://user-session-{session}:other@127.0.0.1:9000"]
    first = published(proxies)
    # Another process reading the same list (a fresh interpreter) derives the same ids.
    code = ("from scrapy_polite.pool.endpoints import expand; from scrapy_polite.gate.redis.state import endpoint_id; "
            f"print([(e.label, endpoint_id(e.ident), e.session_id) for e in expand({proxies!r}, 3)[0]])")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert other.stdout.strip() == repr(first)
    # Entries that differ only by their password are still two endpoints, each with its own ids.
    assert len(first) == 2 + 3 + 3
    assert len({label for label, _, _ in first}) == len({ep_id for _, ep_id, _ in first}) == len(first)
    # A duplicate template adds nothing.
    assert published(proxies + [proxies[2]]) == first


def test_sessions_of_a_template_with_the_session_in_the_password_keep_their_own_ids() -> None:
    ours = published([f"http://user:{PW}-session-{{session}}@127.0.0.1:9000"])
    assert len({ep_id for _, ep_id, _ in ours}) == len(ours) == 3
    assert ours == published(["http://user:guess-session-{session}@127.0.0.1:9000"])
