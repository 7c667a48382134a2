"""A scrapy-redis worker: many processes share one request queue and one proxy pool.

Start any number of ``scrapy crawl fleet`` processes with the same ``REDIS_URL``
and ``POLITE_STATE``, then push URLs to the ``fleet:start_urls`` list. Each
process takes requests from the shared queue; scrapy-polite keeps one request
per endpoint and the per-host budgets across all of them.
"""

from __future__ import annotations

from typing import Any

import scrapy

try:
    from scrapy_redis.spiders import RedisSpider
except ImportError:  # the project's other spiders do not need scrapy-redis
    RedisSpider = None  # type: ignore[assignment,misc]

if RedisSpider is not None:

    class FleetSpider(RedisSpider):
        name = "fleet"
        redis_key = "fleet:start_urls"
        custom_settings = {
            "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
            "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
            "SCHEDULER_PERSIST": False,
        }

        def parse(self, response: scrapy.http.Response) -> Any:
            item_id = response.css("span.id::text").get()
            if item_id is not None:
                yield {"id": int(item_id), "url": response.url, "endpoint": response.meta.get("polite_endpoint")}
