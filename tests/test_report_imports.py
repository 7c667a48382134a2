"""A crawl loads the HTML report only when it writes one (POLITE_REPORT_HTML)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig

# Scrapy's command line imports every command on every run, polite-report's among them: so does the child.
CHILD = """
import json, sys
sys.path.insert(0, sys.argv[3])
from importlib.metadata import entry_points
from scrapy.crawler import CrawlerProcess
from example_project.spiders.catalogue import CatalogueSpider

commands = sorted(ep.value for ep in entry_points(group="scrapy.commands") if ep.load())
process = CrawlerProcess({
    "ADDONS": {"scrapy_polite.Addon": 500}, "POLITE_PROXIES": json.loads(sys.argv[1]),
    "POLITE_DELAY": (0.0, 0.0), "LOG_LEVEL": "WARNING", **json.loads(sys.argv[4]),
    "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
})
crawler = process.create_crawler(CatalogueSpider)
process.crawl(crawler, start_url=sys.argv[2])
process.start()
loaded = sorted(m for m in sys.modules if m == "scrapy_polite.report" or m.startswith("scrapy_polite.report."))
print(json.dumps({"items": crawler.stats.get_value("item_scraped_count", 0), "commands": commands,
                  "loaded": loaded}))
"""


def crawl_in_child(sb: Any, settings: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(sb.proxy_urls), sb.site_url("a"),
         str(ROOT / "example_project"), json.dumps(settings)],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.once
def test_a_crawl_that_writes_no_report_does_not_import_it(sandbox, tmp_path: Path) -> None:
    sb = sandbox(SandboxConfig(sites=[SiteConfig(name="a", pages=5, latency=[0.01, 0.02])],
                               proxies=ProxyConfig(count=3)))
    jsonl = tmp_path / "stats.jsonl"
    without = crawl_in_child(sb, {"POLITE_STATS_JSONL": str(jsonl)})
    assert without["items"] == 5 and jsonl.stat().st_size > 0
    assert "scrapy_polite.cli.report:Command" in without["commands"]
    assert without["loaded"] == []
    # The same crawl writing its report loads it at close, and only then.
    report = tmp_path / "report.html"
    with_report = crawl_in_child(sb, {"POLITE_STATS_JSONL": str(tmp_path / "again.jsonl"),
                                      "POLITE_REPORT_HTML": str(report)})
    assert with_report["items"] == 5 and "<svg" in report.read_text()
    assert "scrapy_polite.report.page" in with_report["loaded"]
