"""How a process sends its stats snapshots to the fleet, through the shared gate's ordered updates."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy_polite.gate.redis.backend import RedisGate

#: Sends this process's stats snapshot to the fleet (a shared state only).
Publisher = Callable[[dict[str, Any]], None]


def fleet_publisher(gate: RedisGate) -> Publisher:
    """Publish stats snapshots through *gate*'s ordered updates, under its namespace.

    Queued behind the gate's own writes, so a snapshot never overtakes the state it describes.
    """
    from scrapy_polite.metrics.fleet_store import publish_commands

    def publish(snap: dict[str, Any]) -> None:
        async def send(client: Any, keys: Any, process_id: str) -> None:
            await publish_commands(client.pipeline(transaction=False), keys, process_id, snap).execute()

        gate.submit(send)

    return publish
