"""What an answer (or a download error) means: ok, rate-limited, challenge, ban, proxy or target error.

:class:`ResponsePolicy` is the one place that decides; the middleware, the
throttle, the stats, tune trials and the report act on the :class:`Verdict`
it returns (kept on each :class:`~scrapy_polite.metrics.outcome.Outcome`).
Set ``POLITE_RESPONSE_POLICY`` to a subclass to judge a site's own pages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy_polite.downloader import failures
from scrapy_polite.downloader.answers import classify_exception
from scrapy_polite.metrics.outcome import is_ban
from scrapy_polite.settings.config import CHALLENGE_BODY_BYTES, ChallengePattern, PoliteConfig
from scrapy_polite.settings.needles import found

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

OK = "ok"
RATE_LIMITED = "rate_limited"
CHALLENGE = "challenge"
BAN = "ban"
PROXY_ERROR = "proxy_error"
TARGET_ERROR = "target_error"
KINDS = (OK, RATE_LIMITED, CHALLENGE, BAN, PROXY_ERROR, TARGET_ERROR)
#: Verdicts on the identity (endpoint) rather than on the pace: the ladder's upper steps.
STRONG = frozenset({CHALLENGE, BAN})


@dataclass(frozen=True)
class Verdict:
    """What one answer means, and why."""

    kind: str
    reason: str = ""
    #: The proxy, not the target, gave the answer (a proxy-error header).
    proxy_side: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Verdict.kind must be one of {KINDS}, got {self.kind!r}")


#: The verdict on every clean answer: one immutable value, not one built per page.
_CLEAN = Verdict(OK)


class ResponsePolicy:
    """The default policy: the configured status codes, proxy errors, and challenge markers."""

    def __init__(self, config: PoliteConfig) -> None:
        self.config = config

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ResponsePolicy:
        from scrapy_polite.runtime import get_runtime

        return cls(get_runtime(crawler).config)

    def classify(
        self, request: Request, response: Response, *, status: int | None = None, headers: Any = None
    ) -> Verdict:
        """The verdict on *response*; *status* and *headers* override its own (an answer relayed by Splash)."""
        cfg = self.config
        status = response.status if status is None else status
        headers = response.headers if headers is None else headers
        proxy_side = any(h in headers for h in cfg.proxy_error_headers)
        if status == 407:
            return Verdict(PROXY_ERROR, "407 Proxy Authentication Required", True)
        if not proxy_side and (marker := self.challenge_marker(status, headers, response)):
            return Verdict(CHALLENGE, marker)
        if status in cfg.rate_limit_codes or (status in cfg.retry_after_codes and b"Retry-After" in headers):
            return Verdict(RATE_LIMITED, str(status), proxy_side)
        if is_ban(status, cfg.ban_codes, proxy_side):
            return Verdict(BAN, str(status))
        if 200 <= status < 400:
            return _CLEAN
        return Verdict(TARGET_ERROR, str(status), proxy_side)

    def classify_exception(self, request: Request, exc: BaseException) -> Verdict:
        """The verdict on a download error: the proxy's fault, or not known to be.

        The middleware acts on ``rate_limited`` (the proxy's 429 on CONNECT),
        ``proxy_error`` (the endpoint fails) and ``target_error`` (anything else).
        """
        failure = classify_exception(request, exc)
        if failure.kind == failures.PROXY_RATE:
            return Verdict(RATE_LIMITED, failure.reason, True)
        if failure.kind == failures.PROXY:
            return Verdict(PROXY_ERROR, failure.reason, True)
        return Verdict(TARGET_ERROR, failure.reason)

    def challenge_marker(self, status: int, headers: Any, response: Response) -> str | None:
        """The first ``POLITE_CHALLENGE_PATTERNS`` entry *response* matches, as a reason."""
        body: bytes | None = None
        lowered: bytes | None = None
        for p in self.config.challenge_patterns:
            if p.header is not None:
                if _header_matches(p, headers):
                    return f"header {p.header}"
                continue
            if p.statuses and status not in p.statuses:
                continue
            if body is None:
                body = getattr(response, "body", b"")[:CHALLENGE_BODY_BYTES]
            if p.body is None:
                continue
            if p.needles and isinstance(body, bytes):
                if p.folded and lowered is None:
                    lowered = body.lower()
                hit = found(p.body, p.needles, p.folded, body, lowered)
            else:
                hit = p.body.search(body) is not None
            if hit:
                return f"{status} body /{p.body.pattern.decode(errors='replace')[:40]}/"
        return None


def load_policy(crawler: Crawler, path: str) -> ResponsePolicy:
    """The ``POLITE_RESPONSE_POLICY`` class, built from the crawler (loaded by path, as Scrapy loads components)."""
    from scrapy.utils.misc import build_from_crawler, load_object

    from scrapy_polite.errors import PoliteConfigError

    try:
        cls = load_object(path)
    except (ImportError, NameError, ValueError, AttributeError) as exc:
        raise PoliteConfigError("POLITE_RESPONSE_POLICY", path, f"an importable class path ({exc})") from None
    policy: ResponsePolicy = build_from_crawler(cls, crawler)
    return policy


def _header_matches(p: ChallengePattern, headers: Any) -> bool:
    values = headers.getlist(p.header) if hasattr(headers, "getlist") else [headers.get(p.header)]
    for raw in values:
        if raw is None:
            continue
        text = raw.decode("latin-1") if isinstance(raw, bytes) else str(raw)
        if p.value is None or p.value.search(text):
            return True
    return False
