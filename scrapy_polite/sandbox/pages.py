"""A site's answer, and the rich test page with its assets (what a renderer fetches for one page)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Reply:
    """An answer a site route decided on."""

    status: int
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    extra: list[tuple[str, str]] | None = None
    user: str | None = None
    challenge: bool = False


#: A 1x1 transparent PNG.
_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


def rich_page(n: int) -> Reply:
    """A page whose rendering fetches a stylesheet, a script, an image and a ``fetch()`` call.

    The script fills ``#api`` with the ``/api/rich/<n>`` answer, so a renderer can wait for it.
    """
    head = (
        f'<link rel="stylesheet" href="/asset/rich-{n}.css">'
        f'<script src="/asset/rich-{n}.js"></script>'
    )
    body = (
        f'<h1>Rich {n}</h1><span class="id">{n}</span><img src="/asset/rich-{n}.png" alt="">'
        '<span id="api"></span>'
    )
    html = f"<!DOCTYPE html><html><head><title>Rich {n}</title>{head}</head><body>{body}</body></html>"
    return Reply(200, html.encode())


def rich_asset(name: str) -> Reply:
    stem, _, ext = name.rpartition(".")
    n = int(stem) if stem.isdigit() else None
    if n is None:
        return Reply(404, b"<h1>Not Found</h1>")
    if ext == "css":
        return Reply(200, b"h1 { color: #333; }", "text/css")
    if ext == "png":
        return Reply(200, _PNG, "image/png")
    if ext == "js":
        js = (
            "window.addEventListener('DOMContentLoaded', function () {"
            f" fetch('/api/rich/{n}').then(function (r) {{ return r.json(); }}).then(function (d) {{"
            " var el = document.getElementById('api'); el.textContent = d.ip; el.className = 'done'; });"
            " });"
        )
        return Reply(200, js.encode(), "application/javascript")
    return Reply(404, b"<h1>Not Found</h1>")
