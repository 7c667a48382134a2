"""Scrapy commands scrapy-polite adds (registered under the ``scrapy.commands`` entry point)."""
