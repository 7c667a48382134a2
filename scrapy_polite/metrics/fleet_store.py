"""Fleet snapshots in Redis: one hash per process, indexed by a sorted set."""

from __future__ import annotations

import json
from typing import Any

from scrapy_polite.gate.redis.state import Keys, sync_client
from scrapy_polite.metrics.fleet import SNAPSHOT_TTL


def publish_commands(client: Any, keys: Keys, process_id: str, snap: dict[str, Any]) -> Any:
    """Queue one snapshot on *client* (a pipeline, sync or asyncio); the caller executes it."""
    key = keys.stats(process_id)
    client.hset(key, mapping={"data": json.dumps(snap, separators=(",", ":")), "updated": snap["updated"]})
    client.expire(key, SNAPSHOT_TTL)
    client.zadd(keys.stats_procs, {process_id: snap["updated"]})
    # Processes whose snapshot has expired leave the index too, so it does not grow run after run.
    client.zremrangebyscore(keys.stats_procs, "-inf", snap["updated"] - SNAPSHOT_TTL)
    client.expire(keys.stats_procs, SNAPSHOT_TTL)
    return client


def read_snapshots(url: str, namespace: str) -> list[dict[str, Any]]:
    """Every process's latest snapshot under *namespace* (expired ones are forgotten)."""
    keys = Keys(namespace)
    client = sync_client(url, timeout=5)
    try:
        out = []
        for proc in client.zrange(keys.stats_procs, 0, -1):
            data = client.hget(keys.stats(proc), "data")
            if data is None:
                continue
            snap = json.loads(data)
            snap["process"] = proc
            out.append(snap)
        return out
    finally:
        client.close()


def clear_snapshots(url: str, namespace: str) -> int:
    """Forget every published snapshot under *namespace*; returns how many there were."""
    keys = Keys(namespace)
    client = sync_client(url, timeout=5)
    try:
        procs = client.zrange(keys.stats_procs, 0, -1)
        if procs:
            client.delete(*(keys.stats(p) for p in procs))
        client.delete(keys.stats_procs)
        return len(procs)
    finally:
        client.close()
