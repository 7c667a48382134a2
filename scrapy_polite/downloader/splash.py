"""Splash (scrapy-splash) support for the middleware.

A processed Splash request names its proxy in its JSON body, so each new
attempt is rebuilt from the original (:func:`remember_original`,
:func:`fresh_request`), and an answer may be Splash's own rather than the
target's (:func:`classify`). Nothing here imports scrapy-splash. See
docs/architecture.md.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy.http.headers import Headers

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.http import Response

#: Request meta key of the snapshot taken before SplashMiddleware's rewrite.
ORIGINAL_KEY = "_polite_splash_original"
#: Meta keys SplashMiddleware adds or changes; a fresh attempt gets the original values back.
SPLASH_META_KEYS = ("_splash_processed", "download_slot", "dont_obey_robotstxt", "download_timeout")
_HTTP_ERROR = re.compile(r"^http(\d{3})$")


@dataclass(frozen=True)
class SplashAnswer:
    """Whose answer a Splash response is.

    ``kind`` is ``"target"`` (``status`` is the target's status),
    ``"proxy"`` (Splash could not get through the proxy) or ``"splash"``
    (Splash's own failure: overloaded, timeout, bad arguments, a script
    error, or a front proxy's error page). ``headers`` are the target's
    response headers as far as Splash passed them on (a script's
    ``headers``), else empty: Splash's own headers say nothing about the
    target (a ``Retry-After`` on Splash's 503 is Splash's).
    """

    kind: str
    status: int | None
    reason: str
    headers: Headers = field(default_factory=Headers)


def is_splash(request: Request) -> bool:
    return bool(request.meta.get("splash"))


def is_processed(request: Request) -> bool:
    """Whether SplashMiddleware already turned *request* into a request to Splash."""
    return bool(request.meta.get("_splash_processed")) and is_splash(request)


def set_proxy(request: Request, proxy_url: str) -> None:
    """Hand the endpoint to Splash (it fetches the page; Scrapy only talks to Splash)."""
    request.meta["splash"].setdefault("args", {})["proxy"] = proxy_url


def remember_original(request: Request) -> None:
    """Keep what a fresh attempt needs, before SplashMiddleware rewrites the request.

    Only picklable values, so the request still fits a disk queue.
    """
    meta = request.meta
    splash = copy.deepcopy(meta["splash"])
    splash.get("args", {}).pop("proxy", None)
    meta[ORIGINAL_KEY] = {
        "url": request.url,
        "method": request.method,
        "headers": {bytes(k): list(v) for k, v in request.headers.items()},
        "body": request.body,
        "priority": request.priority,
        "splash": splash,
        "meta": {k: meta[k] for k in SPLASH_META_KEYS if k in meta},
    }


def fresh_request(request: Request) -> Request | None:
    """*request* as it was before SplashMiddleware, for a new attempt; None without a snapshot.

    Everything else in meta (retry counters, session, cookie jar, depth)
    is kept, so the attempt continues the same logical request.
    """
    orig = request.meta.get(ORIGINAL_KEY)
    if not orig:
        return None
    meta = dict(request.meta)
    for key in SPLASH_META_KEYS:
        meta.pop(key, None)
    meta.update(orig["meta"])
    meta["splash"] = copy.deepcopy(orig["splash"])
    return request.replace(
        url=orig["url"], method=orig["method"], headers=orig["headers"], body=orig["body"],
        priority=orig["priority"], meta=meta, dont_filter=True,
    )


def with_proxy(request: Request, proxy_url: str) -> Request:
    """A processed Splash request whose serialised arguments name *proxy_url*.

    The fallback for a processed request without a snapshot; the JSON is
    written the way SplashMiddleware writes it.
    """
    args = json.loads(request.body.decode("utf-8") or "{}")
    args["proxy"] = proxy_url
    set_proxy(request, proxy_url)
    body = json.dumps(args, ensure_ascii=False, sort_keys=True, indent=4)
    return request.replace(body=body, dont_filter=True)


def classify(request: Request, response: Response) -> SplashAnswer:
    """Whose status *response* (a Splash answer, after SplashMiddleware) carries."""
    splash_status = int(getattr(response, "splash_response_status", None) or response.status)
    data = _json(response)
    headers = _target_headers(data)
    if isinstance(data, dict) and "http_status" in data:
        return SplashAnswer("target", int(data["http_status"]), "http_status", headers)
    if isinstance(data, dict) and "error" in data:
        info = data.get("info")
        code = _target_code(info)
        if code is not None:
            return SplashAnswer("target", code, f"{data.get('type')} {splash_status}", headers)
        if isinstance(info, dict) and info.get("type") == "Network" and _proxied(request):
            # Splash only talks to the proxy: a network failure is the proxy's.
            return SplashAnswer("proxy", None, f"Splash: {info.get('text') or 'network error'} ({info.get('code')})")
        return SplashAnswer("splash", None, f"Splash {splash_status} {data.get('type') or 'error'}")
    if 200 <= splash_status < 300:
        return SplashAnswer("target", response.status, "rendered", headers)
    args = request.meta.get("splash", {}).get("args", {})
    if str(args.get("http_status_from_error_code", "0")).lower() in ("1", "true"):
        return SplashAnswer("target", splash_status, "http_status_from_error_code", headers)
    return SplashAnswer("splash", None, f"Splash {splash_status} (not a Splash JSON error)")


def _proxied(request: Request) -> bool:
    return bool(request.meta.get("splash", {}).get("args", {}).get("proxy"))


def _json(response: Response) -> Any:
    data = getattr(response, "data", None)
    if data is not None:
        return data
    ctype = response.headers.get(b"Content-Type") or b""
    if b"json" not in ctype.lower():
        return None
    try:
        return json.loads(response.body)
    except ValueError:
        return None


def _target_headers(data: Any) -> Headers:
    """The page's headers from a script's ``headers`` key ({name: value}, pairs or HAR list)."""
    raw = data.get("headers") if isinstance(data, dict) else None
    if not raw:
        return Headers()
    try:
        if isinstance(raw, dict):
            return Headers(raw)
        return Headers([(h["name"], h.get("value", "")) if isinstance(h, dict) else tuple(h) for h in raw])
    except (AttributeError, KeyError, TypeError, ValueError):  # names or values of no header type
        return Headers()


def _target_code(info: Any) -> int | None:
    """The target's status inside a Splash error: a script's ``http404`` or a RenderError's HTTP info."""
    if not isinstance(info, dict):
        return None
    match = _HTTP_ERROR.match(str(info.get("error") or ""))
    if match:
        return int(match.group(1))
    if info.get("type") == "HTTP":
        try:
            return int(str(info.get("code")))
        except ValueError:
            return None
    return None
