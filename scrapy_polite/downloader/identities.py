"""Each ``polite_session``'s current identity (the gate's key and the cookie jar), and its retirement."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy_polite import signals as polite_signals
from scrapy_polite.downloader.proxy_meta import session_of
from scrapy_polite.pool.sessions import SessionIdentities

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_polite.gate.base import Gate
    from scrapy_polite.settings.config import PoliteConfig

logger = logging.getLogger(__name__)


class Identities:
    """Hands each session's request its identity; a retired one is counted, logged and signalled."""

    def __init__(self, crawler: Crawler, config: PoliteConfig, gate: Gate) -> None:
        self.crawler = crawler
        self.gate = gate
        self.cookiejar = config.session_cookiejar
        self.identities = SessionIdentities(config.session_max_requests, config.session_max_age)

    def of(self, meta: Any) -> str | None:
        """The gate key of the request's session's current identity (None: no session); its cookie jar goes with it."""
        session = session_of(meta, self.cookiejar)
        if session is None:
            return None
        old = self.identities.current(session)
        key, retired = self.identities.identity(session)
        if retired is not None:
            self._succeed(old, key)
            self.retired(session, meta.get("polite_endpoint"), retired)
        jar = meta.get("cookiejar")
        if self.cookiejar and isinstance(jar, str) and (jar == f"polite:{session}" or jar.startswith(f"polite:{session}#")):
            meta["cookiejar"] = f"polite:{key}"
        return key

    def retire(self, session: str, endpoint: str | None, reason: str) -> None:
        """End *session*'s identity (a challenge or ban): its next request starts on a new one."""
        old = self.identities.current(session)
        self.identities.retire(session)
        self._succeed(old, self.identities.current(session))
        self.retired(session, endpoint, reason)

    def _succeed(self, old: str | None, new: str | None) -> None:
        """The gate starts the new identity on another endpoint than the retired one's."""
        if old is not None and new is not None and old != new:
            self.gate.succeed(old, new)

    def retired(self, session: str, endpoint: str | None, reason: str) -> None:
        self.crawler.stats.inc_value("polite/sessions/retired")
        logger.info("session %r retired (%s); its next request gets a new identity", session, reason)
        self.crawler.signals.send_catch_log(
            polite_signals.session_retired, session=session, endpoint=endpoint, reason=reason
        )
