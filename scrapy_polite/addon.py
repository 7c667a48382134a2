"""The add-on: ``ADDONS = {"scrapy_polite.Addon": 500}`` wires everything."""

from __future__ import annotations

import logging
from typing import Any

from scrapy.settings import SETTINGS_PRIORITIES, BaseSettings

logger = logging.getLogger(__name__)

MIDDLEWARE = "scrapy_polite.downloader.middleware.PoliteProxyMiddleware"
THROTTLE = "scrapy_polite.throttle.extension.HostThrottle"
STATS = "scrapy_polite.metrics.stats.PoliteStats"
QUEUE = "scrapy_polite.scheduler.queue.PolitePriorityQueue"
TRIAL_GUARD = "scrapy_polite.tune.trial.TrialGuard"
MARKS = "scrapy_polite.downloader.marks.PoliteMarksMiddleware"
#: Just before CookiesMiddleware (700), SplashMiddleware (725), HttpProxyMiddleware (750).
MIDDLEWARE_PRIORITY = 650


class Addon:
    """Enables the middleware, the throttle, the stats and the host-aware queue.

    It also takes over what Scrapy would otherwise do on top of the gates:
    RetryMiddleware no longer retries rate-limit codes at once (the
    middleware re-queues them after their cooldown), Scrapy's own per-slot
    delay is set to 0 and AutoThrottle is turned off (at add-on priority,
    so a project that sets them explicitly keeps its value, with a warning).
    With ``POLITE_ENABLED = False`` it only registers the ``POLITE_*``
    defaults, so the crawl is Scrapy's own.
    """

    def update_settings(self, settings: BaseSettings) -> None:
        from scrapy_polite.settings.config import enabled, register_defaults

        register_defaults(settings)
        if not enabled(settings):
            # Off is Scrapy exactly as without the add-on: no component, no setting changed.
            return
        # setdefault: a component the project already lists (disabled with None, or moved) stays as written.
        settings.setdefault_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", _load(MIDDLEWARE), MIDDLEWARE_PRIORITY)
        # Nearest the spider's callbacks: a page a callback marks as a challenge is re-queued.
        settings.setdefault_in_component_priority_dict("SPIDER_MIDDLEWARES", _load(MARKS), 950)
        settings.setdefault_in_component_priority_dict("EXTENSIONS", _load(THROTTLE), 500)
        settings.setdefault_in_component_priority_dict("EXTENSIONS", _load(STATS), 500)
        if settings.get("POLITE_TUNE_TRIAL_FILE"):
            # A trial crawl of `scrapy polite-tune`: its request allowance, counted before the gate.
            from scrapy_polite.tune.trial import PRIORITY

            settings.setdefault_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", _load(TRIAL_GUARD), PRIORITY)
        if settings.get("SCHEDULER_PRIORITY_QUEUE") == "scrapy.pqueues.DownloaderAwarePriorityQueue":
            settings.set("SCHEDULER_PRIORITY_QUEUE", QUEUE, "addon")
        from scrapy_polite.settings.config import rate_limit_codes

        # The same validated reading as the middleware's, so a bad value stops here with its error.
        rate_codes = rate_limit_codes(settings)
        retry_codes = [c for c in settings.getlist("RETRY_HTTP_CODES") if _status(c) not in rate_codes]
        settings.set("RETRY_HTTP_CODES", retry_codes, max(settings.getpriority("RETRY_HTTP_CODES") or 0, 15))
        _replace_startproject_template(settings)
        _lift_slot_concurrency(settings)
        for name, value in (("DOWNLOAD_DELAY", 0), ("AUTOTHROTTLE_ENABLED", False)):
            priority = settings.getpriority(name) or 0
            if priority <= 15:
                settings.set(name, value, "addon")
            elif settings.get(name) not in (value, str(value)):
                logger.warning(
                    "%s=%r from your settings works on top of the POLITE_* gates "
                    "and slows the crawl%s; remove it and tune POLITE_DELAY instead",
                    name, settings.get(name), _delay_cost(settings) if name == "DOWNLOAD_DELAY" else "",
                )


#: What ``scrapy startproject`` writes into a new project's settings.py (Scrapy 2.13 to 2.19 at
#: least): a generic politeness for a crawl without a pool, which the gates replace.
STARTPROJECT_TEMPLATE = {"DOWNLOAD_DELAY": 1, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}


def _replace_startproject_template(settings: BaseSettings) -> None:
    """Take over the template's two lines when a project still has both as generated.

    Together they hold each host to one request at a time, a second apart, whatever the pool:
    a project made by ``scrapy startproject`` would crawl several times slower than the gates
    allow, with the add-on line alone. Only the pair, exactly as generated and at the project's
    priority, is taken over (a spider's ``custom_settings`` or ``-s`` keeps any value), and a log
    line says so.
    """
    names = list(STARTPROJECT_TEMPLATE)
    if any(settings.getpriority(n) != SETTINGS_PRIORITIES["project"] for n in names):
        return
    try:
        as_generated = all(float(settings.get(n)) == v for n, v in STARTPROJECT_TEMPLATE.items())
    except (TypeError, ValueError):
        return
    if not as_generated:
        return
    from scrapy.settings.default_settings import CONCURRENT_REQUESTS_PER_DOMAIN

    from scrapy_polite.settings.config import host_concurrency_max

    # What the project would get without the two lines, the add-on applied; at the project's
    # priority, which the add-on's own cannot replace.
    settings.set("DOWNLOAD_DELAY", 0, "project")
    most = max(host_concurrency_max(settings), CONCURRENT_REQUESTS_PER_DOMAIN)
    settings.set("CONCURRENT_REQUESTS_PER_DOMAIN", most, "project")
    logger.info(
        "DOWNLOAD_DELAY = 1 and CONCURRENT_REQUESTS_PER_DOMAIN = 1, as scrapy startproject "
        "writes them, are replaced by the POLITE_* gates (they would hold each host to one request at a "
        "time, about 60 per minute, whatever the pool); set POLITE_DELAY or POLITE_HOST_CONCURRENCY to "
        "slow a host down, or remove the two lines from settings.py to silence this"
    )


def _delay_cost(settings: BaseSettings) -> str:
    """What ``DOWNLOAD_DELAY`` costs on top of the gates, for its warning."""
    try:
        delay = float(settings.get("DOWNLOAD_DELAY"))
    except (TypeError, ValueError):
        return ""
    if not delay > 0:
        return ""
    return (
        f" (Scrapy waits about {delay:g} s between two requests to a host, whatever the pool: "
        f"at most about {60 / delay:.0f} pages/min per host)"
    )


def _lift_slot_concurrency(settings: BaseSettings) -> None:
    """Let Scrapy's download slot carry as many transfers as the gate grants one host.

    The slot caps a host's transfers at ``CONCURRENT_REQUESTS_PER_DOMAIN`` (default 8)
    after the gate granted them, so a granted request would wait there holding its
    endpoint, and ``POLITE_HOST_CONCURRENCY`` above 8 would silently mean 8. A value the
    project set itself stays, with a warning when it is below the gate's.
    """
    from scrapy_polite.settings.config import host_concurrency_max

    name, most = "CONCURRENT_REQUESTS_PER_DOMAIN", host_concurrency_max(settings)
    if settings.getint(name) >= most:
        return
    if (settings.getpriority(name) or 0) <= 15:
        settings.set(name, most, "addon")
    else:
        logger.warning(
            "%s=%r from your settings caps each host below POLITE_HOST_CONCURRENCY(_MAX) (%d): "
            "at most %s request(s) to a host at a time, whatever the pool; remove it and set "
            "POLITE_HOST_CONCURRENCY instead", name, settings.get(name), most, settings.get(name),
        )


def _status(code: Any) -> Any:
    """A RETRY_HTTP_CODES entry as an int when it is one (Scrapy itself judges the rest)."""
    try:
        return int(code)
    except (TypeError, ValueError):
        return code


def _load(path: str) -> Any:
    from scrapy.utils.misc import load_object

    return load_object(path)
