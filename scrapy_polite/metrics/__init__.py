"""What a crawl measured: one outcome per attempt, stats, JSONL, Prometheus, fleet totals."""
