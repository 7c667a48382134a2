"""One bounded crawl by one client, in its own process.

``python benchmarks/crawl_client.py --client NAME --json ARGS`` where ARGS is a
JSON object (or ``@path`` to a JSON file) with ``spider`` ("catalogue" or
"accounts"), ``start_urls``, ``users``, ``proxies``, ``time_limit``,
``page_budget``, ``settings`` (extra Scrapy settings), ``result`` (where to
write the JSON result) and ``log_file``. The result holds the crawler-side
view (items, stats, CPU seconds); the benchmark's metrics come from the
sandbox access log, not from here.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import re
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "example_project"))
sys.path.insert(0, str(ROOT))

SCRAPY_CLIENTS = (
    "scrapy-defaults",
    "scrapy-autothrottle",
    "scrapy-rotating-proxies",
    "polite-defaults",
    "polite-adaptive",
    "reference",
)
CLIENTS = SCRAPY_CLIENTS[:3] + ("asyncio-recipe",) + SCRAPY_CLIENTS[3:]

#: The recipe's knobs, as the brief for a hand-written asyncio crawler states them.
RECIPE_HOST_CONCURRENCY = 2
RECIPE_DELAY = (0.8, 1.6)
RECIPE_RATE_RETRIES = 10
RECIPE_ERROR_RETRIES = 5
RECIPE_DEFAULT_RETRY_AFTER = 5.0
RECIPE_MAX_RETRY_AFTER = 60.0


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def scrapy_settings(client: str, args: dict[str, Any]) -> dict[str, Any]:
    """Scrapy settings of *client* for this run."""
    limit = float(args["time_limit"])
    base: dict[str, Any] = {
        "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "LOG_LEVEL": "INFO",
        "LOG_FILE": args.get("log_file"),
        "DOWNLOAD_TIMEOUT": 5,
        "CLOSESPIDER_TIMEOUT": limit,
        "CLOSESPIDER_PAGECOUNT": int(args["page_budget"]) * 4,
        "FEED_EXPORT_ENCODING": "utf-8",
        "ADDONS": {},
    }
    proxies = list(args["proxies"])
    if client in ("scrapy-defaults", "scrapy-autothrottle"):
        base["BENCH_PROXIES"] = proxies
        base["DOWNLOADER_MIDDLEWARES"] = {"bench_mw.RoundRobinProxyMiddleware": 740}
        if client == "scrapy-autothrottle":
            base["AUTOTHROTTLE_ENABLED"] = True
    elif client == "scrapy-rotating-proxies":
        base["ROTATING_PROXY_LIST"] = proxies
        base["DOWNLOADER_MIDDLEWARES"] = {
            "rotating_proxies.middlewares.RotatingProxyMiddleware": 610,
            "rotating_proxies.middlewares.BanDetectionMiddleware": 620,
        }
    elif client in ("polite-defaults", "polite-adaptive"):
        base["ADDONS"] = {"scrapy_polite.Addon": 500}
        base["POLITE_PROXIES"] = list(args.get("polite_proxies") or proxies)
        base["POLITE_LOG_INTERVAL"] = 0
        if client == "polite-adaptive":
            base["POLITE_ADAPTIVE"] = True
    elif client == "reference":  # botocore's adaptive retry mode (reference_controller.py)
        base["BENCH_PROXIES"] = proxies
        base["DOWNLOADER_MIDDLEWARES"] = {"reference_controller.ReferenceMiddleware": 740}
        base["RETRY_HTTP_CODES"] = [500, 502, 504, 522, 524, 408]  # 429 and 503 are its throttles
    else:
        raise SystemExit(f"unknown Scrapy client {client!r}")
    base.update(args.get("settings") or {})
    return base


def run_scrapy(client: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run the spider with CrawlerProcess; return items, selected stats and CPU times."""
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess

    if client == "scrapy-rotating-proxies":
        import rotating_proxies.middlewares  # noqa: F401  (fail early if it does not import)

    if args["spider"] == "accounts":
        from example_project.spiders.accounts import AccountsSpider as spidercls

        kwargs = {"start_url": args["start_urls"][0], "users": str(args["users"])}
    else:
        from example_project.spiders.catalogue import CatalogueSpider as spidercls

        kwargs = {"start_url": " ".join(args["start_urls"])}

    process = CrawlerProcess(scrapy_settings(client, args))
    crawler = process.create_crawler(spidercls)
    items: list[dict[str, Any]] = []
    marks: dict[str, float] = {}

    def opened(spider: Any) -> None:
        marks["cpu_open"], marks["t_open"] = cpu_seconds(), time.time()

    def closed(spider: Any, reason: str) -> None:
        marks["cpu_close"], marks["t_close"] = cpu_seconds(), time.time()
        marks["reason"] = reason  # type: ignore[assignment]

    crawler.signals.connect(lambda item, **_: items.append(dict(item)), signal=signals.item_scraped, weak=False)
    crawler.signals.connect(opened, signal=signals.spider_opened, weak=False)
    crawler.signals.connect(closed, signal=signals.spider_closed, weak=False)
    process.crawl(crawler, **kwargs)
    process.start()
    stats = {k: v for k, v in (crawler.stats.get_stats() or {}).items() if _keep_stat(k)}
    return {
        "items": len(items),
        "unique_items": len({json.dumps(i, sort_keys=True, default=str) for i in items}),
        "finish_reason": marks.get("reason"),
        "crawl_cpu": marks.get("cpu_close", cpu_seconds()) - marks.get("cpu_open", 0.0),
        "crawl_seconds": marks.get("t_close", time.time()) - marks.get("t_open", time.time()),
        "stats": json.loads(json.dumps(stats, default=str)),
    }


def _keep_stat(key: str) -> bool:
    if key.startswith("polite/"):
        return key.count("/") <= 2 and not key.startswith(("polite/endpoint/", "polite/host/"))
    return key.startswith(("downloader/response_status_count", "retry/", "finish_reason", "item_scraped",
                           "response_received", "proxies/", "bans/", "elapsed", "log_count/ERROR"))


# -- the hand-written asyncio recipe -------------------------------------------------

HREF_RE = re.compile(r'href="([^"]+)"')
ID_RE = re.compile(r'<span class="id">(\d+)</span>')
USER_RE = re.compile(r'<span class="user">([^<]*)</span>')


class Recipe:
    """httpx crawler: a semaphore per host, a lock per endpoint, jittered sleep, Retry-After."""

    def __init__(self, args: dict[str, Any]) -> None:
        import httpx

        self.httpx = httpx
        self.args = args
        self.proxies = list(args["proxies"])
        self.clients = [
            httpx.AsyncClient(proxy=p, timeout=5.0, trust_env=False, follow_redirects=False)
            for p in self.proxies
        ]
        self.locks = [asyncio.Lock() for _ in self.proxies]
        self.host_sems: dict[str, asyncio.Semaphore] = defaultdict(
            lambda: asyncio.Semaphore(RECIPE_HOST_CONCURRENCY)
        )
        self.rr = itertools.count()
        self.budget = int(args["page_budget"])
        self.ok = 0
        self.items = 0
        self.gave_up = 0
        self.statuses: dict[int, int] = defaultdict(int)

    async def fetch(self, url: str, cookie: str | None = None) -> Any:
        """GET *url* through the next endpoint; 429s wait out Retry-After and retry."""
        host = urlsplit(url).netloc
        rate_tries = error_tries = 0
        while True:
            i = next(self.rr) % len(self.proxies)
            async with self.locks[i]:
                resp = None
                async with self.host_sems[host]:
                    try:
                        headers = {"Cookie": cookie} if cookie else None
                        resp = await self.clients[i].get(url, headers=headers)
                    except self.httpx.HTTPError:
                        resp = None
                if resp is not None:
                    self.statuses[resp.status_code] += 1
                if resp is not None and resp.status_code == 429:
                    await asyncio.sleep(_retry_after(resp.headers.get("retry-after")))
                    rate_tries += 1
                    if rate_tries > RECIPE_RATE_RETRIES:
                        self.gave_up += 1
                        return None
                    continue
                await asyncio.sleep(random.uniform(*RECIPE_DELAY))
            if resp is None:
                error_tries += 1
                if error_tries > RECIPE_ERROR_RETRIES:
                    self.gave_up += 1
                    return None
                continue
            if resp.status_code == 200:
                self.ok += 1
            return resp

    async def catalogue(self) -> None:
        """Breadth-first crawl from the start URLs, deduplicated, until the budget or the queue ends."""
        queue: asyncio.Queue[str] = asyncio.Queue()
        seen: set[str] = set()
        for u in self.args["start_urls"]:
            seen.add(u)
            queue.put_nowait(u)

        async def worker() -> None:
            while True:
                url = await queue.get()
                try:
                    if self.ok >= self.budget:
                        continue
                    resp = await self.fetch(url)
                    if resp is None or resp.status_code != 200:
                        continue
                    if ID_RE.search(resp.text):
                        self.items += 1
                    for href in HREF_RE.findall(resp.text):
                        if "/list/" in href or "/item/" in href:
                            nxt = urljoin(url, href)
                            if nxt not in seen:
                                seen.add(nxt)
                                queue.put_nowait(nxt)
                finally:
                    queue.task_done()

        workers = [asyncio.create_task(worker()) for _ in range(2 * len(self.proxies))]
        try:
            await queue.join()
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def accounts(self) -> None:
        """login -> account -> orders per user, the user's cookie carried by hand, no pinning."""
        base = self.args["start_urls"][0].rstrip("/")

        async def flow(user: str) -> None:
            resp = await self.fetch(f"{base}/login?user={user}")
            if resp is None or resp.status_code != 200:
                return
            sid = resp.cookies.get("sid")
            cookie = f"sid={sid}" if sid else None
            for path in ("/account", "/account/orders"):
                resp = await self.fetch(base + path, cookie)
                if resp is None or resp.status_code != 200:
                    return
            self.items += 1

        await asyncio.gather(*(flow(f"user{i}") for i in range(int(self.args["users"]))))

    async def run(self) -> str:
        """Run the crawl within the time limit; return the finish reason."""
        job = self.accounts() if self.args["spider"] == "accounts" else self.catalogue()
        reason = "finished"
        try:
            await asyncio.wait_for(job, timeout=float(self.args["time_limit"]))
        except asyncio.TimeoutError:
            reason = "closespider_timeout"
        finally:
            await asyncio.gather(*(c.aclose() for c in self.clients), return_exceptions=True)
        return reason


def _retry_after(value: str | None) -> float:
    """Seconds from a Retry-After header (seconds form; HTTP-date too), with a fallback."""
    if value is None:
        return RECIPE_DEFAULT_RETRY_AFTER
    try:
        return min(RECIPE_MAX_RETRY_AFTER, max(0.0, float(value)))
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            return min(RECIPE_MAX_RETRY_AFTER, max(0.0, parsedate_to_datetime(value).timestamp() - time.time()))
        except (TypeError, ValueError):
            return RECIPE_DEFAULT_RETRY_AFTER


def run_recipe(args: dict[str, Any]) -> dict[str, Any]:
    """Run the asyncio recipe; same result shape as :func:`run_scrapy`."""
    recipe = Recipe(args)
    cpu0, t0 = cpu_seconds(), time.time()
    reason = asyncio.run(recipe.run())
    return {
        "items": recipe.items,
        "unique_items": recipe.items,
        "finish_reason": reason,
        "crawl_cpu": cpu_seconds() - cpu0,
        "crawl_seconds": time.time() - t0,
        "stats": {"recipe/ok": recipe.ok, "recipe/gave_up": recipe.gave_up,
                  **{f"recipe/status/{k}": v for k, v in sorted(recipe.statuses.items())}},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", required=True, choices=CLIENTS)
    parser.add_argument("--scenario", default="", help="scenario name (for the record only)")
    parser.add_argument("--json", required=True, help="JSON arguments, or @file")
    ns = parser.parse_args()
    raw = Path(ns.json[1:]).read_text() if ns.json.startswith("@") else ns.json
    args = json.loads(raw)
    t0 = time.time()
    out = run_recipe(args) if ns.client == "asyncio-recipe" else run_scrapy(ns.client, args)
    out.update(client=ns.client, scenario=ns.scenario, wall=time.time() - t0, total_cpu=cpu_seconds())
    Path(args["result"]).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
