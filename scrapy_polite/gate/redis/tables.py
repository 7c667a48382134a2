"""The state of the Redis gate in this process: ids, mirrors, spacings, pumps, the connection's state."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, fields
from typing import Any

from scrapy_polite.gate.core import GateCore
from scrapy_polite.gate.redis.fence import WriteFence
from scrapy_polite.gate.redis.running_max import RunningMax
from scrapy_polite.gate.redis.state import Keys, endpoint_id, import_redis, mask_url
from scrapy_polite.gate.state import HostSignal, Lease
from scrapy_polite.pool.endpoints import Endpoint
from scrapy_polite.settings.config import HOST_TTL, PIN_TTL

#: Shared keys that nobody touches expire after this, so a namespace cleans itself up.
IDLE_TTL = 24 * 3600.0
#: A host or session with nothing in flight and nobody waiting is forgotten here after
#: this long; what it learned stays in Redis and is read again when it comes back.
IDLE_KEEP = 60.0


@dataclass(frozen=True)
class RedisOptions:
    """Where the shared state is and how long its records live: the keywords of a Redis gate
    besides :class:`~scrapy_polite.gate.core.GateOptions`."""

    url: str
    namespace: str
    lease_ttl: float = 5.0
    pin_ttl: float = PIN_TTL
    host_ttl: float = HOST_TTL
    idle_keep: float = IDLE_KEEP
    poll: float = 0.05
    outage_timeout: float = 0.0


_REDIS_OPTIONS = frozenset(f.name for f in fields(RedisOptions))


class RedisTables(GateCore):
    """What :class:`~scrapy_polite.gate.redis.backend.RedisGate` keeps in this process, besides the common tables."""

    def __init__(self, endpoints: Iterable[Endpoint], **options: Any) -> None:
        """Keyword arguments: the fields of :class:`RedisOptions` and of :class:`~scrapy_polite.gate.core.GateOptions`."""
        super().__init__(**{k: v for k, v in options.items() if k not in _REDIS_OPTIONS})
        o = RedisOptions(**{k: v for k, v in options.items() if k in _REDIS_OPTIONS})
        self._redis = import_redis()
        # Redis away: wait and retry. Any other Redis error (out of memory, a script error)
        # is logged and the update dropped, rather than retried forever as an outage.
        self._errors: tuple[type[BaseException], ...] = (
            self._redis.ConnectionError, self._redis.TimeoutError, OSError,
        )
        self.url = o.url
        self.label = mask_url(o.url)
        self.keys = Keys(o.namespace)
        self.lease_ttl = o.lease_ttl
        self.pin_ttl = o.pin_ttl
        self.host_ttl = o.host_ttl
        self.idle_keep = o.idle_keep
        self.poll = o.poll
        self.process_id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self._ids: dict[str, str] = {}
        self._by_id: dict[str, str] = {}
        self._order: OrderedDict[str, None] = OrderedDict()
        self._signals: dict[str, HostSignal] = {}
        #: Per host, the Redis time of this process's own last signal: read back, it is not news.
        self._sent_signals: dict[str, str] = {}
        #: Per host, the version of the shared interval this process's view of it is of: what a
        #: fresh read brought, or this process's own change made (see ``set_interval.lua``).
        self._interval_v: dict[str, int] = {}
        # The host values this process changed, so a grant read before a change reached Redis
        # cannot bring the old value back here (the throttle takes a value that moved as
        # another process's step).
        self._fence = WriteFence()
        # This process's own spacing per (endpoint key, host), kept locally too, so
        # a Redis restart that loses its data cannot make this process send early.
        self._spacing: dict[tuple[str, str], float] = {}
        self._spacing_due: list[tuple[float, str, str]] = []  # heap of (until, endpoint key, host)
        # Hosts with nothing in flight and nobody waiting, oldest first, with when they went
        # idle: evicted after idle_keep (as idle sessions), a few per call and on each renewal.
        self._idle_hosts: OrderedDict[str, float] = OrderedDict()
        self._longest = RunningMax(self.delay[1])
        self._pumps: dict[str, asyncio.Future[None]] = {}
        self._wakeups: dict[str, asyncio.Event] = {}
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self._ops: asyncio.Queue[tuple[Callable[[], Coroutine[Any, Any, Any]], Callable[[], None] | None]] | None = None
        self._tasks: list[asyncio.Future[None]] = []
        self._stopped = False
        # Set when this gate stops talking to Redis; background loops end on it, since
        # redis-py can turn a task's cancellation into a connection error.
        self._halted = False
        self._down_since: float | None = None
        self._renewed = False
        # Redis time of the last answer from Redis (0: none yet), and the end of the
        # fleet-wide grace this process last logged.
        self._seen = 0.0
        self._grace_until = 0.0
        #: Seconds Redis may stay unreachable before ``listeners.on_outage_timeout`` is called (0: never).
        self.outage_timeout = o.outage_timeout
        self._outage_reported = False
        self.set_endpoints(endpoints)

    def _call_later(self, delay: float, func: Callable[[], object]) -> object:
        return asyncio.get_running_loop().call_later(delay, func)

    def _new_token(self) -> str:
        return secrets.token_hex(8)

    def _release_args(self, lease: Lease) -> list[Any]:
        ep_id = self._ids.get(lease.endpoint.key, endpoint_id(lease.endpoint.ident))
        return [self.keys.prefix, lease.host, lease.session or "", lease.token, ep_id,
                self.keys.held(self.process_id), lease.token, self.lease_ttl]

    def _longest_spacing(self) -> float:
        """The longest gap any host known here asks for, which a grace after a reset must cover
        (an evicted host has nothing in flight to re-assert)."""
        return self._longest.value()
