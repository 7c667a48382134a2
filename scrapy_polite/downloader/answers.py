"""What an answer or a download error is: the proxy's failure, a rate signal, a ban, or one to keep."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from scrapy_polite.downloader import failures
from scrapy_polite.downloader import playwright as playwright_support
from scrapy_polite.downloader import splash as splash_support
from scrapy_polite.metrics.outcome import is_ban

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.http.headers import Headers

    from scrapy_polite.settings.config import PoliteConfig

#: 407: the endpoint's credentials were refused.
PROXY_AUTH = "proxy_auth"
RATE = "rate"
BAN = "ban"
OK = "ok"
#: The connection to Splash failed, not the proxy (Splash reports proxy failures in its answer).
SPLASH = "splash"


@dataclass(frozen=True)
class Answer:
    kind: str
    #: The proxy sent it (one of ``POLITE_PROXY_ERROR_HEADERS``), not the site.
    proxy_side: bool
    retry_after: bytes | None


def classify(status: int, headers: Headers, config: PoliteConfig) -> Answer:
    """The kind of the answer *status* with *headers*, as ``POLITE_*_CODES`` define it."""
    proxy_side = any(h in headers for h in config.proxy_error_headers)
    retry_after = headers.get(b"Retry-After")
    if status == 407:
        kind = PROXY_AUTH
    elif status in config.rate_limit_codes or (status in config.retry_after_codes and retry_after is not None):
        kind = RATE
    elif is_ban(status, config.ban_codes, proxy_side):
        kind = BAN
    else:
        kind = OK
    return Answer(kind, proxy_side, retry_after)


def classify_exception(request: Request, exception: BaseException) -> failures.Failure:
    """Whom the download error *exception* of *request* blames (``failures`` kinds, or :data:`SPLASH`)."""
    if playwright_support.is_playwright(request) and (reason := playwright_support.proxy_failure(exception)):
        return failures.Failure(failures.PROXY, reason)
    if splash_support.is_processed(request):
        return failures.Failure(SPLASH, type(exception).__name__)
    return failures.classify(exception)
