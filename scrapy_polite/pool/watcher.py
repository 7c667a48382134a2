"""``POLITE_PROXIES_FILE`` watched: a changed file becomes the gate's new pool."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from scrapy_polite.errors import PoliteConfigError

if TYPE_CHECKING:
    from scrapy_polite.gate.base import Gate
    from scrapy_polite.settings.config import PoliteConfig

logger = logging.getLogger(__name__)


def mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


class ProxiesFileWatcher:
    """Reloads the proxies file into the gate when its modification time changes."""

    def __init__(self, config: PoliteConfig, gate: Gate, stats: Any) -> None:
        assert config.proxies_file is not None
        self.config = config
        self.path: str = config.proxies_file
        self.gate = gate
        self.stats = stats
        self._mtime = mtime(self.path)

    def check(self) -> None:
        """Apply a changed file; whatever goes wrong, the pool stays and the caller's loop goes on.

        A LoopingCall stops for good on an exception, so nothing may escape: an
        unusable file is one ERROR (naming the file and the line, never its content).
        """
        current = mtime(self.path)
        if current == self._mtime:
            return
        self._mtime = current
        try:
            endpoints, _ = self.config.load_endpoints(reload=True)
            added, removed = self.gate.set_endpoints(endpoints)
        except PoliteConfigError as exc:
            logger.error("scrapy-polite: kept the current pool, as %s cannot be used: %s", self.path, exc)
            return
        except Exception:
            logger.exception("scrapy-polite: kept the current pool, as reloading %s failed", self.path)
            return
        if added or removed:
            logger.info(
                "scrapy-polite: %s changed: %d endpoint(s) added %s, %d removed %s",
                self.path, len(added), added, len(removed), removed,
            )
            self.stats.inc_value("polite/pool_reloads")
        self.stats.set_value("polite/endpoints", sum(not s.removed for s in self.gate.endpoints.values()))
