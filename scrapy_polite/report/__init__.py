"""A self-contained HTML report from ``POLITE_STATS_JSONL`` files.

``polite-report stats.jsonl.1 stats.jsonl -o report.html`` (:mod:`scrapy_polite.cli.report`), or
``POLITE_REPORT_HTML`` at spider close. Files are read as a stream (:mod:`.records`) and folded
into bounded aggregates (:mod:`.model`), drawn as inline SVG (:mod:`.charts`, :mod:`.timeline`)
on one page (:mod:`.page`, :mod:`.compare` for two runs). A crawl imports this package only
when it writes a report.
"""
