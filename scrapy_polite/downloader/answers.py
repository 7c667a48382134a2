"""What a download error is: the proxy's failure, Splash's, or one the evidence must place.

An answer is judged by the response policy (:mod:`scrapy_polite.downloader.response_policy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_polite.downloader import failures
from scrapy_polite.downloader import playwright as playwright_support
from scrapy_polite.downloader import splash as splash_support

if TYPE_CHECKING:
    from scrapy import Request

#: The connection to Splash failed, not the proxy (Splash reports proxy failures in its answer).
SPLASH = "splash"


def classify_exception(request: Request, exception: BaseException) -> failures.Failure:
    """Whom the download error *exception* of *request* blames (``failures`` kinds, or :data:`SPLASH`)."""
    if playwright_support.is_playwright(request) and (reason := playwright_support.proxy_failure(exception)):
        return failures.Failure(failures.PROXY, reason)
    if splash_support.is_processed(request):
        return failures.Failure(SPLASH, type(exception).__name__)
    return failures.classify(exception)
