"""Crawls a catalogue: list pages lead to item pages; one item per item page."""

from __future__ import annotations

from typing import Any

import scrapy


class CatalogueSpider(scrapy.Spider):
    name = "catalogue"

    def __init__(self, start_url: str = "http://127.0.1.1:8080", *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.start_urls = [u for u in start_url.replace(",", " ").split() if u]

    def parse(self, response: scrapy.http.Response) -> Any:
        for href in response.css("a::attr(href)").getall():
            if "/list/" in href or "/item/" in href:
                yield response.follow(href, callback=self.parse_page)

    def parse_page(self, response: scrapy.http.Response) -> Any:
        item_id = response.css("span.id::text").get()
        if item_id is not None:
            yield {"id": int(item_id), "url": response.url, "endpoint": response.meta.get("polite_endpoint")}
        yield from self.parse(response)
