"""scrapy-polite: crawl through a proxy pool at the rate a site allows.

Enable everything with ``ADDONS = {"scrapy_polite.Addon": 500}`` and list
your proxies in ``POLITE_PROXIES``.
"""

from .addon import Addon
from .errors import NoUsableEndpoints, PoliteConfigError, SessionEndpointLost
from .retry_after import parse_retry_after
from .sessions import follow_in_session, session_meta

__version__ = "0.1.0"

__all__ = [
    "Addon",
    "NoUsableEndpoints",
    "PoliteConfigError",
    "SessionEndpointLost",
    "follow_in_session",
    "parse_retry_after",
    "session_meta",
    "__version__",
]
