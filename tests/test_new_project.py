"""A project made by ``scrapy startproject``, with the add-on line alone, crawls at the gates' speed.

Scrapy's project template sets ``DOWNLOAD_DELAY = 1`` and ``CONCURRENT_REQUESTS_PER_DOMAIN = 1``:
left in force under the add-on they hold each host to one request at a time, 0.5 to 1.5 s apart,
whatever the pool. The add-on takes that pair over; any other value stays, with a warning that
says what it costs.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from logcheck import items_fetched, max_inflight_host
from scrapy.settings import Settings

from scrapy_polite.addon import Addon
from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig

PAGES = 32
TIMEOUT = 120

SPIDER = '''
import scrapy


class PagesSpider(scrapy.Spider):
    name = "pages"

    async def start(self):
        for i in range(1, {pages} + 1):
            yield scrapy.Request(f"{base}/item/{{i}}")

    def start_requests(self):  # Scrapy < 2.13's name for start()
        for i in range(1, {pages} + 1):
            yield scrapy.Request(f"{base}/item/{{i}}")

    def parse(self, response):
        yield {{"url": response.url}}
'''


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPY_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc


def test_a_generated_project_with_the_addon_line_alone_crawls_at_the_gates_speed(sandbox, tmp_path: Path) -> None:
    sb = sandbox(SandboxConfig(sites=[SiteConfig(name="a", pages=PAGES, latency=[0.1, 0.1])],
                               proxies=ProxyConfig(count=8)))
    _run([sys.executable, "-m", "scrapy", "startproject", "newproj"], tmp_path)
    project = tmp_path / "newproj"
    settings_py = project / "newproj" / "settings.py"
    text = settings_py.read_text()
    # The template as generated: the two lines, and the ADDONS line the Quick start fills in.
    assert "\nDOWNLOAD_DELAY = 1\n" in text and "\nCONCURRENT_REQUESTS_PER_DOMAIN = 1\n" in text
    assert "\nADDONS = {}\n" in text
    text = text.replace("\nADDONS = {}\n", '\nADDONS = {"scrapy_polite.Addon": 500}\n')
    settings_py.write_text(text + f"\nPOLITE_PROXIES = {sb.proxy_urls!r}\nTELNETCONSOLE_ENABLED = False\n")
    spider = SPIDER.format(pages=PAGES, base=sb.site_url("a"))
    (project / "newproj" / "spiders" / "pages.py").write_text(spider)

    proc = _run([sys.executable, "-m", "scrapy", "crawl", "pages"], project)

    log = [e for e in sb.log() if e["path"].startswith("/item/")]
    assert sorted(items_fetched(log)) == list(range(1, PAGES + 1))
    # Under the template's pair a host never had two requests at once, and each gap was >= 0.5 s.
    assert max_inflight_host(log, "a") > 1
    starts = sorted(e["t_start"] for e in log)
    assert starts[-1] - starts[0] < 0.5 * (PAGES - 1), starts[-1] - starts[0]
    # And the log says what was taken over, and why.
    assert "as scrapy startproject writes them, are replaced by the POLITE_* gates" in proc.stderr
    assert "works on top of the POLITE_* gates" not in proc.stderr


def _applied(values: dict[str, object], priority: str = "project") -> Settings:
    settings = Settings()
    settings.setdict(values, priority)
    Addon().update_settings(settings)
    return settings


def test_only_the_templates_pair_at_the_projects_priority_is_taken_over(caplog: pytest.LogCaptureFixture) -> None:
    pair = {"DOWNLOAD_DELAY": 1, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}
    taken = _applied(pair)
    assert taken.getfloat("DOWNLOAD_DELAY") == 0 and taken.getint("CONCURRENT_REQUESTS_PER_DOMAIN") >= 8
    # A spider's custom_settings (or -s) keeps the pair, and so does a project that changed either line.
    for values, priority in ((pair, "spider"), ({**pair, "DOWNLOAD_DELAY": 2}, "project")):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="scrapy_polite.addon"):
            kept = _applied(values, priority)
        assert kept.getfloat("DOWNLOAD_DELAY") == values["DOWNLOAD_DELAY"]
        assert kept.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == 1
        # The warnings say what the values cost.
        delay = values["DOWNLOAD_DELAY"]
        assert f"at most about {60 / delay:.0f} pages/min per host" in caplog.text  # type: ignore[operator]
        assert "at most 1 request(s) to a host at a time" in caplog.text
