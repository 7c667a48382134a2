"""The reference client: botocore's adaptive retry mode, as a Scrapy downloader middleware.

As ``botocore/retries/{adaptive,bucket,throttling}.py``, one limiter per host: no limit until
the first throttle; then a token bucket (fill rate >= 0.5/s, capacity max(1, rate)) whose rate
is cut to beta = 0.7 x the measured sending rate on each throttle and grows back on a CUBIC
curve (C = 0.4), capped at 2 x the measured rate; the rate is measured over 0.5 s buckets,
smoothed 0.8. 429 and 503 are throttles, retried after their Retry-After (else botocore's
standard backoff, random x 2^attempt up to 20 s). Proxies go round-robin on every request.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import time
from typing import Any
from urllib.parse import urlsplit

from scrapy.exceptions import IgnoreRequest

BETA, SCALE, MIN_RATE, BUCKET_RANGE, SMOOTHING, MAX_ADJUST = 0.7, 0.4, 0.5, 0.5, 0.8, 2.0
THROTTLES, MAX_ATTEMPTS = (429, 503), 10


class AdaptiveLimiter:
    """``ClientRateLimiter`` with its ``TokenBucket``, ``RateClocker`` and ``CubicCalculator``."""

    def __init__(self, now: float) -> None:
        self.enabled, self.w_max, self.k, self.last_fail = False, 0.0, 0.0, now
        self.rate, self.capacity, self.tokens, self.stamp = 1.0, 1.0, 0.0, now
        self.measured, self.count, self.last_bucket = 0.0, 0, math.floor(now)

    def refill(self, now: float) -> None:
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def set_rate(self, value: float, now: float) -> None:
        self.refill(now)
        self.rate, self.capacity = max(value, MIN_RATE), max(value, 1.0)
        self.tokens = min(self.tokens, self.capacity)

    def wait(self, now: float) -> float:
        """0 if a token was taken, else the seconds until one may be there."""
        if not self.enabled:
            return 0.0
        self.refill(now)
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate

    def response(self, throttled: bool, now: float) -> None:
        bucket = math.floor(now / BUCKET_RANGE) * BUCKET_RANGE
        self.count += 1
        if bucket > self.last_bucket:
            current = self.count / (bucket - self.last_bucket)
            self.measured = current * SMOOTHING + self.measured * (1 - SMOOTHING)
            self.count, self.last_bucket = 0, bucket
        if throttled:
            self.w_max = self.measured if not self.enabled else min(self.measured, self.rate)
            self.k, self.last_fail, self.enabled = (self.w_max * (1 - BETA) / SCALE) ** (1 / 3), now, True
            new = self.w_max * BETA
        else:
            new = SCALE * (now - self.last_fail - self.k) ** 3 + self.w_max
        self.set_rate(min(new, MAX_ADJUST * self.measured), now)


class ReferenceMiddleware:
    """Waits for a token before each request; retries throttles after their Retry-After."""

    def __init__(self, proxies: list[str], time_limit: float = 0.0) -> None:
        self._cycle = itertools.cycle(proxies) if proxies else None
        self._hosts: dict[str, AdaptiveLimiter] = {}
        #: Past CLOSESPIDER_TIMEOUT a waiting request is dropped, so the crawl can close.
        self._deadline = time.monotonic() + time_limit if time_limit > 0 else math.inf

    @classmethod
    def from_crawler(cls, crawler: Any) -> ReferenceMiddleware:
        settings = crawler.settings
        return cls(settings.getlist("BENCH_PROXIES"), settings.getfloat("CLOSESPIDER_TIMEOUT"))

    def _limiter(self, request: Any) -> AdaptiveLimiter:
        host = urlsplit(request.url).netloc
        return self._hosts.setdefault(host, AdaptiveLimiter(time.monotonic()))

    async def process_request(self, request: Any, spider: Any = None) -> None:
        delay = request.meta.get("reference_not_before", 0.0) - time.monotonic()
        if time.monotonic() + max(0.0, delay) > self._deadline:
            raise IgnoreRequest("reference: the crawl's time limit came first")
        if delay > 0:
            await asyncio.sleep(delay)
        limiter = self._limiter(request)
        while (wait := limiter.wait(time.monotonic())) > 0:
            if time.monotonic() + wait > self._deadline:
                raise IgnoreRequest("reference: the crawl's time limit came first")
            await asyncio.sleep(wait)
        if self._cycle is not None:
            request.meta["proxy"] = next(self._cycle)

    def process_response(self, request: Any, response: Any, spider: Any = None) -> Any:
        throttled = response.status in THROTTLES
        self._limiter(request).response(throttled, time.monotonic())
        attempt = request.meta.get("reference_attempt", 1)
        if not throttled or attempt >= MAX_ATTEMPTS:
            return response
        value = (response.headers.get(b"Retry-After") or b"").decode("latin-1").strip()
        after = float(value) if value.isdigit() else min(20.0, random.random() * 2 ** attempt)
        meta = {**request.meta, "reference_attempt": attempt + 1,
                "reference_not_before": time.monotonic() + after}
        return request.replace(meta=meta, dont_filter=True)
