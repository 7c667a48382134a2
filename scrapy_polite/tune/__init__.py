"""``scrapy polite-tune``: trials that change one variable at a time, and the guard each trial crawl runs."""
