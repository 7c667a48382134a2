"""``POLITE_PROXIES_FILE`` watched: a changed file becomes the gate's new pool."""

from __future__ import annotations

import hashlib
import logging
import os
from typing import TYPE_CHECKING, Any

from scrapy_polite.errors import PoliteConfigError

if TYPE_CHECKING:
    from scrapy_polite.gate.base import Gate
    from scrapy_polite.settings.config import PoliteConfig

logger = logging.getLogger(__name__)


#: Files up to this size are also told apart by a hash of their content (read at each check).
HASH_MAX_BYTES = 1024 * 1024

#: What tells a file's versions apart: (device, inode, size, mtime in ns, content hash or None).
Signature = tuple[int, int, int, int, str | None]


def signature(path: str) -> Signature | None:
    """*path*'s version, by more than its mtime; ``None`` while it cannot be read.

    Config managers swap files by symlink, and some stores keep every file's mtime
    fixed: the file the path leads to (device, inode), its size, and the hash of a
    small file's content catch a change that leaves the mtime as it was.
    """
    try:
        st = os.stat(path)
        digest = None
        if st.st_size <= HASH_MAX_BYTES:
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read(HASH_MAX_BYTES + 1)).hexdigest()
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, digest


class ProxiesFileWatcher:
    """Reloads the proxies file into the gate when it changes (see :func:`signature`)."""

    def __init__(self, config: PoliteConfig, gate: Gate, stats: Any) -> None:
        assert config.proxies_file is not None
        self.config = config
        self.path: str = config.proxies_file
        self.gate = gate
        self.stats = stats
        self._signature = signature(self.path)

    def check(self) -> None:
        """Apply a changed file; whatever goes wrong, the pool stays and the caller's loop goes on.

        A LoopingCall stops for good on an exception, so nothing may escape: an
        unusable file is one ERROR (naming the file and the line, never its content).
        """
        current = signature(self.path)
        if current == self._signature:
            return
        self._signature = current
        try:
            endpoints, _ = self.config.load_endpoints(reload=True)
            added, removed = self.gate.set_endpoints(endpoints)
        except PoliteConfigError as exc:
            logger.error("kept the current pool, as %s cannot be used: %s", self.path, exc)
            return
        except Exception:
            logger.exception("kept the current pool, as reloading %s failed", self.path)
            return
        if added or removed:
            logger.info(
                "%s changed: %d endpoint(s) added %s, %d removed %s",
                self.path, len(added), added, len(removed), removed,
            )
            self.stats.inc_value("polite/pool_reloads")
        self.stats.set_value("polite/endpoints", sum(not s.removed for s in self.gate.endpoints.values()))
