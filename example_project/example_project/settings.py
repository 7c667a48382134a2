"""An ordinary Scrapy project that crawls through a proxy pool with scrapy-polite."""

import os

BOT_NAME = "example_project"
SPIDER_MODULES = ["example_project.spiders"]
NEWSPIDER_MODULE = "example_project.spiders"

ROBOTSTXT_OBEY = False

# One line turns on the middleware, the host throttle, the stats and the queue.
ADDONS = {"scrapy_polite.Addon": 500}

# The pool: a file (one proxy URL per line, re-read when it changes) or a list.
POLITE_PROXIES_FILE = os.environ.get("POLITE_PROXIES_FILE", "proxies.txt")

# The defaults, spelled out: tune one at a time and compare successful pages/min.
POLITE_HOST_CONCURRENCY = 2
POLITE_ENDPOINT_CONCURRENCY = 1
POLITE_DELAY = (0.8, 1.6)

POLITE_LOG_INTERVAL = 10
POLITE_STATS_JSONL = os.environ.get("POLITE_STATS_JSONL") or None

LOG_LEVEL = "INFO"
FEED_EXPORT_ENCODING = "utf-8"
