"""crawl through a proxy pool at the rate a site allows.

Enable everything with ``ADDONS = {"scrapy_polite.Addon": 500}`` and list
your proxies in ``POLITE_PROXIES``.
"""

from scrapy_polite.addon import Addon
from scrapy_polite.downloader.retry_after import parse_retry_after
from scrapy_polite.errors import (
    BanDetected,
    ChallengeDetected,
    NoUsableEndpoints,
    PoliteConfigError,
    SessionEndpointLost,
)
from scrapy_polite.pool.sessions import follow_in_session, session_meta

__version__ = "0.1.0"

__all__ = [
    "Addon",
    "BanDetected",
    "ChallengeDetected",
    "NoUsableEndpoints",
    "PoliteConfigError",
    "SessionEndpointLost",
    "follow_in_session",
    "parse_retry_after",
    "session_meta",
    "__version__",
]
