"""The settings reference: one doc line per setting, beside the values in ``DEFAULTS``.

The docs' settings page is generated from this table and from ``DEFAULTS`` (see
docs/conf.py); a test fails when a setting has no line here, so a new setting cannot be
left out of the reference. Texts are Markdown (MyST), links relative to docs/.
"""

from __future__ import annotations

from typing import Any

from scrapy_polite.settings.config import DEFAULTS

#: Setting (or settings read together, joined by `` / ``) -> what it does.
DOCS: dict[str, str] = {
    'POLITE_HOST_BLOCKED': 'What a host\'s requests do once every endpoint it may use (its top tier, with tiers) is benched for it by challenges or bans: `"give_up"` (given up, `polite/gave_up/host_blocked`, so a crawl whose other work is done finishes) or `"wait"` (they wait for the first bench to end). Either way one WARNING per block says when the first identity comes back.',
    'POLITE_ENABLED': 'Turn the whole package off without removing the add-on. `False` is Scrapy exactly as without the add-on: no component enabled, and `RETRY_HTTP_CODES`, `DOWNLOAD_DELAY`, AutoThrottle and the scheduler queue left as the project set them.',
    'POLITE_PROXIES': 'Proxy URLs (`http://` or `https://`). A URL without a scheme, such as `user:pass@host:port` as most providers list them, is taken as `http://` (as Scrapy\'s `add_http_if_no_scheme` does). An entry may be `{"url": ..., "exit_ip": "203.0.113.7"}` to give a static exit IP. A URL containing `{session}` is a gateway template. A string (from `-s` or Scrapyd) is split on commas and spaces, so a password holding `,` or a space must be percent-encoded there (`%2C`, `%20`); a piece that is not a whole proxy URL stops the crawl with an error naming the piece by its number, never its text.',
    'POLITE_PROXIES_FILE': 'File of proxy URLs (UTF-8), one per line, `#` comments. Checked every `POLITE_PROXIES_FILE_CHECK_INTERVAL` (5 s). Added endpoints join the pool. Removed ones take no new requests, and their in-flight requests finish; the sessions pinned to one wait two check intervals for it to come back before `POLITE_SESSION_POLICY` applies. A file that cannot be read, is not UTF-8, has a bad line or lists no proxy keeps the current pool, with one ERROR naming the file and the line (never its content).',
    'POLITE_PROXIES_FILE_CHECK_INTERVAL': 'Seconds between two checks of `POLITE_PROXIES_FILE` for changes; a changed file is re-read and the pool updated.',
    'POLITE_GATEWAY_SESSIONS': 'Session ids per gateway template, each one a virtual endpoint (one exit identity). At most 10,000.',
    'POLITE_HOST_CONCURRENCY': 'Requests in flight per host, across all endpoints (the starting value when adapting).',
    'POLITE_HOST_CONCURRENCY_MAX': "How far clean windows may raise a host's concurrency.",
    'POLITE_ENDPOINT_CONCURRENCY': 'Requests in flight per endpoint.',
    'POLITE_DELAY': 'Spacing between two requests of one endpoint to one host, uniform in `(min, max)` seconds. A single number `d` means `(2d/3, 4d/3)`.',
    'POLITE_HOST_KEY': 'What the host cap groups by: `meta[\'download_slot\']` if set, else the hostname (`"slot"`), or always the hostname (`"hostname"`).',
    'POLITE_SESSION_POLICY': 'When a session\'s endpoint dies, or stays out of the proxies file past its grace: `"fail"` fails its requests with `SessionEndpointLost`; `"repin"` moves the session with a warning and the `session_repinned` signal. A session lost to a removal runs again on its endpoint once the endpoint is back.',
    'POLITE_SESSION_COOKIEJAR': "Give each session its own cookie jar (`meta['cookiejar']`) unless the request sets one.",
    'POLITE_RATE_LIMIT_CODES': 'Statuses that are rate signals (at least one; `-s POLITE_RATE_LIMIT_CODES="429 420"` works too).',
    'POLITE_RETRY_AFTER_CODES': 'Statuses that are rate signals only when they carry `Retry-After`.',
    'POLITE_RETRY_AFTER_MAX': 'Cap, in seconds, on any `Retry-After` and on a robots.txt `Crawl-delay`.',
    'POLITE_COOLDOWN': 'Cooldown in seconds, uniform, when there is no usable `Retry-After`.',
    'POLITE_RATE_RETRY_TIMES': 'Re-queues per request after rate signals. This budget is separate from `RETRY_TIMES`.',
    'POLITE_BACKOFF_FACTOR': "Multiplicative decrease of concurrency on a rate signal, and the deepest single cut of a host's rate.",
    'POLITE_RECOVERY_WINDOW': "Seconds without a rate signal before a host gets +1 concurrency (and, without adaptive mode, spacing back toward `POLITE_DELAY`). Also how long a host's rate holds just below a rate that drew a 429 before probing past it: one window without adaptive mode (a quarter while the host's limit has fallen under where it stood); in adaptive mode the first hold is 6 s, four times as long after each probe that meets the same ceiling, up to four windows (while the limit has fallen, 6 s until three probes met the same ceiling, then doubling).",
    'POLITE_HOST_PAUSE_ENDPOINTS / POLITE_HOST_PAUSE_WINDOW': 'This many distinct endpoints rate-limited within the window means a host-wide limit, so the whole host pauses for the Retry-After.',
    'POLITE_PARK_AFTER / POLITE_PARK_TIME': 'A host still limiting at concurrency 1 after this many decreases is parked, for a doubling interval, with a WARNING.',
    'POLITE_ADAPTIVE': 'Also search upward: a new host starts at the rate `POLITE_DELAY` gives the pool and climbs 1.5 times per round of one answer per IP until its first signal; each IP\'s spacing then follows the host rate down to `POLITE_DELAY_FLOOR`, and concurrency follows rate × latency. Without it, spacing never goes under `POLITE_DELAY`. See [The throttle](throttle.md).',
    'POLITE_DELAY_FLOOR': 'The lowest spacing adaptive mode may use.',
    'POLITE_PROXY_RETRY_TIMES': 'Re-assignments to another endpoint after certain proxy failures (refused, unreachable, a CONNECT refused with any status but 429, 407).',
    'POLITE_TIMEOUT_RETRY_TIMES': 'Re-queues after failures that say nothing certain about the proxy: a timeout, a lost or reset connection, a truncated answer. Then the request is given up (`polite/gave_up/timeout`). Separate from the proxy budget and from `RETRY_TIMES`.',
    'POLITE_STALL_TIMEOUT': "Seconds after which a request still unanswered gives its host slot back, while its endpoint stays busy until the answer or `DOWNLOAD_TIMEOUT`, so a hanging proxy cannot hold a host's concurrency. `0` turns it off. It has no effect at or above `DOWNLOAD_TIMEOUT`. A slow host may then see more than `POLITE_HOST_CONCURRENCY` requests at once, if some take longer than this.",
    'POLITE_ENDPOINT_BACKOFF': 'Base and cap, in seconds, of the exponential backoff of a failing endpoint before it is re-checked.',
    'POLITE_ENDPOINT_MAX_FAILURES': 'Failures in a row that make an endpoint dead. A dead endpoint still gets one probe request per backoff cap, and a success brings it back. When every endpoint is dead, the spider closes with `polite_no_usable_endpoints`.',
    'POLITE_BAN_CODES / POLITE_BAN_DURATION': 'A ban answer benches that endpoint for that host only, and the request is tried elsewhere (up to twice).',
    'POLITE_RESPONSE_POLICY': "Class path (built with `from_crawler`) of the one component that decides what each answer means: `ok`, `rate_limited`, `challenge`, `ban`, `proxy_error` or `target_error`. The middleware, the throttle, the stats, the JSONL (`verdict`), tune trials and the report all act on its verdict. Subclass it and override `classify(request, response, **kw)` to judge a site's own pages. See [Challenges and tiers](challenges-and-tiers.md).",
    'POLITE_CHALLENGE_PATTERNS': 'What makes an answer a challenge: a list of `{"header": name, "value": regex}` (e.g. `cf-mitigated: challenge`; `value` optional) and `{"status": [codes], "body": regex}` entries (`status` optional: any status; the first 64 KiB of the body are searched). Defaults: `cf-mitigated: challenge`, `x-amzn-waf-action: captcha\\|challenge`, a "verify you are human" / "Just a moment..." / `cf-chl-` / PerimeterX / DataDome body at any status, and a reCAPTCHA / hCaptcha / Turnstile / Incapsula body on a 403, 429 or 503 (ordinary pages carry those widgets and scripts too). Checked once at start-up.',
    'POLITE_CHALLENGE_BENCH': 'Seconds a challenged endpoint is benched for that host (longer than a 429 cooldown or a ban).',
    'POLITE_CHALLENGE_RETRY_TIMES': 'Re-queues after challenges, each through another endpoint, with a budget of their own.',
    'POLITE_PROXY_TIERS': 'Tiers of proxies, cheapest first: each a list of proxies (as in `POLITE_PROXIES`) or the path of a proxies file. `POLITE_PROXIES` (and its file), if set too, is tier 0. Without tiers the whole pool is one tier.',
    'POLITE_TIER_ESCALATE_AFTER / POLITE_TIER_COOLDOWN': 'A host moves up a tier after this many challenges or bans on its current tier (or once every endpoint of that tier is benched for it), and steps back down after this many seconds without one.',
    'POLITE_SESSION_MAX_REQUESTS / POLITE_SESSION_MAX_AGE': "Retire a session's identity after this many requests or seconds: its next request gets a new endpoint (another than the retired identity's, while the pool has one the host may use; a gateway endpoint gives a new session id) and a new cookie jar (`session_retired` signal). A challenge or ban retires it too.",
    'POLITE_LEASE_TIMEOUT': 'A lease (endpoint + host slot) held this long without an answer is released with a WARNING, so a request dropped by another component cannot hold an endpoint forever.',
    'POLITE_EXIT_IP_HEADERS': 'Response headers that providers use to name the exit IP.',
    'POLITE_EXIT_IP_PROBE_URL': 'An IP-echo URL to probe through each endpoint at start-up, for the exit IP when no header says it.',
    'POLITE_EXIT_IP_PROBE_TIMEOUT': 'Seconds per probe.',
    'POLITE_PROXY_ERROR_HEADERS': 'Headers that mark a response as coming from the proxy, not the target: a 429 carrying one cools the endpoint, not the host.',
    'POLITE_STATS_JSONL': 'Path for one JSON line per request attempt. The file is size-capped by `POLITE_STATS_JSONL_MAX_BYTES` (100 MiB) and rotated to `.1`. Placeholders as in `FEEDS` URIs: `%(name)s` (spider name), `%(time)s` (start time, UTC, as in `FEEDS`), `%(job)s` (Scrapyd\'s job id, its `_job` spider argument, which `FEEDS` spells `%(_job)s`; the process id outside Scrapyd) and any spider attribute or argument, e.g. `"logs/%(name)s-%(job)s.jsonl"`, so that concurrent jobs write and rotate files of their own. An unknown placeholder stops the crawl at start-up.',
    'POLITE_STATS_JSONL_MAX_BYTES': "Size in bytes at which the `POLITE_STATS_JSONL` file is rotated to `.1` (one rotated file is kept), so a long crawl's attempt records stay bounded.",
    'POLITE_REPORT_HTML': 'Path of an HTML report written at spider close from the run\'s `POLITE_STATS_JSONL` file (its rotated `.1` first), with the same placeholders, e.g. `"logs/%(name)s-%(job)s.html"`. Needs `POLITE_STATS_JSONL`: without it, or with an unknown placeholder, the crawl stops at start-up.',
    'POLITE_STATS_TOP': 'Hosts and endpoints with stats keys (`polite/host/<host>/…`, `polite/endpoint/<endpoint>/…`, `polite/throttle/<host>/…`) and Prometheus series of their own: the ones with the most attempts at the end (for Prometheus and the throttle keys, the first ones seen). The rest are summed under `(other)`; `polite/hosts_folded` and `polite/endpoints_folded` count the names folded. Per-host latency percentiles are kept for the first this many hosts only.',
    'POLITE_STATS_SESSIONS_MAP': 'Sessions listed in the `polite/sessions_map` stat at the end of a crawl (by session key; 0 leaves the stat out). `polite/sessions_map_left_out` counts the rest.',
    'POLITE_HOST_MEMORY': "Idle hosts whose learned limits (concurrency, spacing band, `Crawl-delay`, host rate, the throttle's findings) are kept after their live state is dropped, least recently used first out; 0 keeps none. A host seen again resumes from them if they are younger than `POLITE_STATE_PIN_TTL`, else from the configured defaults.",
    'POLITE_STATS_WINDOW': 'Seconds in the sliding window for "pages/min now".',
    'POLITE_LOG_INTERVAL': 'Seconds between progress log lines (0 turns them off).',
    'POLITE_PROMETHEUS_PORT / POLITE_PROMETHEUS_ADDRESS': 'Port 0–65535 (0: a free one) and address to serve Prometheus metrics (`pip install scrapy-polite[prometheus]`). Off by default.',
    'POLITE_STATE': 'Where the gates keep their state. `"redis://host:6379/0"` shares it with every process that uses the same Redis and namespace (see [Several processes](redis.md)). Unreachable at start-up: the crawl stops with an error. A password goes in the URL (`redis://:pass@host:6379/0`, or `?password=pass`); wherever the URL is shown (errors, logs, the `fleet` command), it is masked as `***`.',
    'POLITE_STATE_NAMESPACE': 'Key prefix in Redis. Processes that share a pool and targets use the same one; unrelated fleets use different ones.',
    'POLITE_STATE_LEASE_TTL': 'Seconds a lease lives in Redis without renewal (renewed every third of that while its request is in flight). A killed process frees its endpoints and host slots within this time.',
    'POLITE_STATE_PIN_TTL': "Seconds a session's pin to an endpoint lives in Redis after its last request. The process that ran the session keeps its own pin; after this long, another process that takes up the session may pin it anew. Set it above the longest pause between two steps of one session.",
    'POLITE_STATE_HOST_TTL': "Seconds a host's shared record in Redis (its learned concurrency, delay band, interval, grant count and last rate signal) lives after the host's last grant or change. A host crawled again within this time starts from what the fleet learned; after it, from the defaults.",
    'POLITE_STATE_POLL': "Seconds between grant attempts while a host's slots or an endpoint are held by another process.",
    'POLITE_PLAYWRIGHT_MAX_CONTEXTS': "Browser contexts the pool keeps open for rendered requests (one per endpoint, one per session). At a new one beyond it, the least recently used idle context is closed (a session's cookies and storage are saved and handed to the context that replaces it). At most `PLAYWRIGHT_MAX_CONTEXTS`. See [Browser rendering](rendering.md#browser-rendering-scrapy-playwright).",
    'POLITE_PLAYWRIGHT_BLOCK': 'Playwright resource types a rendered page may not fetch (`"image"`, `"stylesheet"`, `"font"`, `"media"`, `"script"`, `"xhr"`, `"fetch"`, `"websocket"`, ...; never `"document"`). They are aborted in the browser and never reach the site. Combined with your own `PLAYWRIGHT_ABORT_REQUEST`.',
    'POLITE_STATE_OUTAGE_TIMEOUT': 'Seconds Redis may stay unreachable mid-crawl before the spider closes with `polite_state_unreachable` (0: wait for it forever).',
    'DOWNLOAD_SLOTS': "Per-host overrides, keyed like the host cap (`meta['download_slot']` or the hostname): `concurrency` replaces `POLITE_HOST_CONCURRENCY` for that host and is also the most the throttle grows it to; `delay` replaces `POLITE_DELAY`, spanning 0.5–1.5 times the delay with `randomize_delay` (default `RANDOMIZE_DOWNLOAD_DELAY`), exactly the delay without it, or (1−j)–(1+j) times it with `jitter` j. Precedence: the `DOWNLOAD_SLOTS` entry for that key, then the `POLITE_*` defaults; the throttle adapts from there (down on rate signals, back up to it on clean windows). Scrapy's own slot delay for those hosts is set to 0, as `DOWNLOAD_DELAY` is, since the gates space them already. A bad entry stops the crawl at start-up with an error naming it.",
}

#: Defaults that depend on other settings: shown as words, not as their ``None``.
SHOWN_DEFAULTS: dict[str, str] = {
    'POLITE_HOST_CONCURRENCY_MAX': 'same (×4 if adaptive)',
    'POLITE_CHALLENGE_PATTERNS': 'common CAPTCHA / JavaScript-check markers',
    'POLITE_LEASE_TIMEOUT': '`DOWNLOAD_TIMEOUT` + 60',
    'POLITE_PLAYWRIGHT_MAX_CONTEXTS': '`PLAYWRIGHT_MAX_CONTEXTS`, else `16`',
    'DOWNLOAD_SLOTS': '`{}`',
}
#: Scrapy's own settings the package reads, documented here too.
SCRAPY_SETTINGS = frozenset({"DOWNLOAD_SLOTS"})


def shown_default(name: str) -> str:
    """*name*'s default as the reference shows it: ``300`` for ``300.0``, strings in double quotes."""
    if name in SHOWN_DEFAULTS:
        return SHOWN_DEFAULTS[name]
    return f"`{_literal(DEFAULTS[name])}`"


def _literal(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "(" + ", ".join(_literal(v) for v in value) + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return repr(value)


def markdown_table() -> str:
    """The reference table, in Markdown: setting, default, meaning."""
    rows = ["| Setting | Default | Meaning |", "|---|---|---|"]
    for key, meaning in DOCS.items():
        names = key.split(" / ")
        shown = " / ".join(f"`{n}`" + (" (Scrapy's)" if n in SCRAPY_SETTINGS else "") for n in names)
        rows.append(f"| {shown} | {' / '.join(shown_default(n) for n in names)} | {meaning} |")
    return "\n".join(rows) + "\n"
