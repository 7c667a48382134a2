"""Fault cases of the settings: a proxies file replaced with the same modification time, and values
that must stop the crawl at start-up (naming the setting) instead of failing late or hanging.

Each is a real crawl against the sandbox, judged from the site's access log (tests/faultcheck.py).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from example_project.spiders.catalogue import CatalogueSpider
from faultcheck import FAULT_AUTH, assert_clean, assert_no_secret, assert_pages_accounted, fault_crawl
from logcheck import items_fetched
from test_faults_config import Steps, lines

from scrapy_polite.errors import PoliteConfigError
from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig

#: The modification time every version of the proxies file keeps, as some stores do.
FIXED_MTIME = 1_700_000_000


def keep_mtime(path: Path) -> None:
    os.utime(path, (FIXED_MTIME, FIXED_MTIME), follow_symlinks=True)


def swap_symlink(link: Path, target: Path) -> None:
    """Point *link* at *target* atomically, as config managers do."""
    tmp = link.with_name(link.name + ".new")
    tmp.symlink_to(target)
    os.replace(tmp, link)


@pytest.mark.parametrize("how", ["symlink", "in_place"])
@pytest_twisted.ensureDeferred
async def test_a_proxies_file_replaced_with_the_same_mtime_is_read_again(sandbox, tmp_path, how: str) -> None:
    sb = sandbox(SandboxConfig(sites=[SiteConfig(name="a", pages=40, latency=[0.05, 0.1])],
                               proxies=ProxyConfig(count=4, auth=FAULT_AUTH), max_runtime=120))
    old, new = sb.proxy_urls[:2], sb.proxy_urls[2:]
    first, second = tmp_path / "proxies-1.txt", tmp_path / "proxies-2.txt"
    first.write_bytes(lines(*old))
    # The same length as the first: only the content (and, for a swap, the file) tells them apart.
    second.write_bytes(lines(*new))
    assert len(lines(*old)) == len(lines(*new))
    for path in (first, second):
        keep_mtime(path)
    path = tmp_path / "proxies.txt"
    if how == "symlink":
        path.symlink_to(first)

        def change() -> None:
            swap_symlink(path, second)
    else:
        path.write_bytes(lines(*old))
        keep_mtime(path)

        def change() -> None:
            with open(path, "r+b") as f:  # rewritten in place, same inode, same size, same mtime
                f.write(lines(*new))
            keep_mtime(path)

    with Steps([(lambda: len(sb.log()) >= 6, change)]) as steps:
        run = await fault_crawl(CatalogueSpider, {
            "POLITE_PROXIES_FILE": str(path), "POLITE_PROXIES_FILE_CHECK_INTERVAL": 0.2,
            "POLITE_DELAY": (0.2, 0.3), "CLOSESPIDER_TIMEOUT": 40,
        }, tmp_path / "crawl.log", start_url=sb.site_url("a"))
    log = sb.log()
    assert run.stats["finish_reason"] == "finished"
    assert len(steps.times) == 1, "the crawl ended before the file changed"
    assert os.stat(path).st_mtime == FIXED_MTIME
    old_ips, new_ips = set(sb.proxy_exit_ips[:2]), set(sb.proxy_exit_ips[2:])
    changed = steps.times[0]
    assert {e["ip"] for e in log if e["t_start"] < changed} == old_ips
    # After a check interval, the removal grace (two checks) and one spacing: only the new pool.
    late = {e["ip"] for e in log if e["t_start"] > changed + 0.2 + 0.4 + 0.3 + 0.5}
    assert late and late <= new_ips, late
    assert run.stats.get("polite/pool_reloads") == 1
    assert_pages_accounted(run, log, range(1, 41))
    assert sorted(items_fetched(log)) == list(range(1, 41))
    assert_clean(run)


class NotAPolicy:
    """Importable, a class, and not a response policy."""


@pytest.mark.parametrize(("setting", "value"), [
    ("POLITE_EXIT_IP_PROBE_URL", "http://[::1"),
    ("POLITE_EXIT_IP_PROBE_URL", "http://127.0.0.1:99999/ip"),
    ("POLITE_RESPONSE_POLICY", "os.path.join"),
    ("POLITE_RESPONSE_POLICY", f"{__name__}.NotAPolicy"),
    ("POLITE_STATE", "redis://host:notaport/0"),
    ("POLITE_STATE", f"redis://crawler:{FAULT_AUTH[1]}@host:notaport/0"),
    ("POLITE_HOST_BLOCKED", "never"),
    # Written during the crawl: a directory that is not there would only show as an ERROR then.
    ("POLITE_STATS_JSONL", "/nonexistent-dir/polite.jsonl"),
    ("POLITE_PROMETHEUS_ADDRESS", "no-such-host.invalid"),
])
@pytest_twisted.ensureDeferred
async def test_a_setting_that_cannot_work_stops_the_crawl_at_start_up_naming_it(
    sandbox, tmp_path, setting: str, value: Any
) -> None:
    sb = sandbox(SandboxConfig(sites=[SiteConfig(name="a", pages=5)], proxies=ProxyConfig(count=2, auth=FAULT_AUTH),
                               max_runtime=60))
    started = time.monotonic()
    with pytest.raises(PoliteConfigError) as caught:
        await fault_crawl(CatalogueSpider, {
            "POLITE_PROXIES": sb.proxy_urls, setting: value, "CLOSESPIDER_TIMEOUT": 20,
        }, tmp_path / "crawl.log", start_url=sb.site_url("a"))
    assert caught.value.setting == setting and str(caught.value).startswith(f"{setting}=")
    assert time.monotonic() - started < 10
    assert sb.log() == []  # nothing was sent
    assert_no_secret(FAULT_AUTH[1], str(caught.value), (tmp_path / "crawl.log").read_text())
