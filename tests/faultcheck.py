"""Shared checks of the fault-injection suite (``tests/test_faults_*.py``).

Each fault case is a real crawl against the sandbox, run by :func:`fault_crawl`, which also
captures every log line at DEBUG and every request given up. The case then asserts, from the
site's access log: every page fetched exactly once or given up with its reason
(:func:`assert_pages_accounted`), no traceback (:func:`assert_no_traceback`), and no credential
anywhere (:func:`assert_no_secret`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import scrapy
from conftest import CrawlResult, crawl
from example_project.spiders.catalogue import CatalogueSpider
from logcheck import ITEM_RE, items_fetched, refetched

from scrapy_polite import signals as polite_signals

#: Every fault case's proxies ask for this password (``ProxyConfig(auth=FAULT_AUTH)``), so each
#: case can check that no output shows it.
FAULT_AUTH = ("crawler", "Fault-s3cret-pw")


@dataclass
class FaultRun:
    result: CrawlResult
    #: Every log line of the crawl, DEBUG and up, with tracebacks as logging formats them.
    log_text: str
    #: (url, reason) of each request given up.
    gave_up: list[tuple[str, str]] = field(default_factory=list)

    @property
    def stats(self) -> dict[str, Any]:
        return self.result.stats


async def fault_crawl(
    spidercls: type, settings: dict[str, Any], log_path: Path, *, connect: dict[object, Any] | None = None,
    **spider_kwargs: Any,
) -> FaultRun:
    """:func:`conftest.crawl` with a DEBUG log written to *log_path* and give-ups collected.

    *connect*: more signal handlers (signal -> handler) to connect before the crawl starts.
    """
    gave_up: list[tuple[str, str]] = []

    def on_gave_up(request: Any, reason: str) -> None:
        gave_up.append((request.url, reason))

    def on_crawler(crawler: Any) -> None:
        crawler.signals.connect(on_gave_up, signal=polite_signals.request_gave_up)
        for signal, handler in (connect or {}).items():
            crawler.signals.connect(handler, signal=signal)

    handler = logging.FileHandler(log_path, encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(asctime)s [%(name)s] %(levelname)s: %(message)s"))
    # Scrapy's cookie middleware asks tldextract for the public suffix list, which it tries to
    # download once per machine and logs the failure with a traceback: there is no internet here.
    handler.addFilter(lambda record: not record.name.startswith("tldextract"))
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        result = await crawl(
            spidercls, {"LOG_LEVEL": "DEBUG", **settings},
            _on_crawler=on_crawler,
            **spider_kwargs,
        )
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        handler.close()
    return FaultRun(result, log_path.read_text(encoding="utf-8", errors="replace"), gave_up)


def assert_pages_accounted(
    run: FaultRun, log: list[dict[str, Any]], pages: Iterable[int], site: str | None = None,
    undelivered_ips: Iterable[str] = (),
) -> None:
    """Each item page was answered 200 exactly once, or its request was given up with a reason.

    *undelivered_ips*: exit IPs of proxies that die during the crawl, whose last answers may
    never have reached the crawler (see :func:`logcheck.refetched`).
    """
    fetched = items_fetched(log, site)
    given_up = {int(m.group(1)) for url, _ in run.gave_up if (m := ITEM_RE.search(urlsplit(url).path))}
    twice = refetched(log, site, undelivered_ips)
    missing = sorted(i for i in pages if i not in fetched and i not in given_up)
    assert not twice, f"pages fetched more than once: {twice}"
    assert not missing, f"pages neither fetched nor given up: {missing}"
    assert all(reason for _, reason in run.gave_up), run.gave_up


def assert_clean(run: FaultRun, *outputs: str | Path) -> None:
    """No traceback in the crawl's log, and the proxies' password in none of its outputs."""
    assert_no_traceback(run.log_text)
    assert_no_secret(FAULT_AUTH[1], run.log_text, json.dumps(run.stats, default=str), *outputs)


def assert_no_traceback(*texts: str) -> None:
    for text in texts:
        assert "Traceback (most recent call last)" not in text, text[text.find("Traceback"):][:3000]


def assert_no_secret(secret: str, *sources: str | Path) -> None:
    """*secret* appears in none of *sources* (texts, or files read as bytes)."""
    needle = secret.encode()
    for source in sources:
        data = Path(source).read_bytes() if isinstance(source, Path) else source.encode("utf-8", "replace")
        at = data.find(needle)
        assert at < 0, f"credential found in {source if isinstance(source, Path) else 'text'}: " + repr(
            data[max(0, at - 200): at + 50]
        )


class Catalogue(CatalogueSpider):
    """The catalogue spider with an errback: a page given up is the spider's to note, not a traceback."""

    def parse(self, response):
        for request in super().parse(response):
            if isinstance(request, scrapy.Request):
                request = request.replace(errback=self.failed)
            yield request

    def failed(self, failure) -> None:
        self.logger.info("gave up %s (%s)", failure.request.url, type(failure.value).__name__)
