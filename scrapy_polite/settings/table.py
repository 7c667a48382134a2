"""The settings table: every ``POLITE_*`` setting once, with how it is read, its default, its bounds and its doc line.

From it come the defaults the add-on registers (``DEFAULTS``), the validation at
start-up and the fields of :class:`~scrapy_polite.settings.config.PoliteConfig` (each
setting fills the field named after it: ``POLITE_HOST_KEY`` -> ``host_key``), and the
settings reference in the docs (see docs/conf.py). Doc lines are Markdown (MyST),
links relative to docs/.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scrapy_polite.pool.host_memory import HOST_MEMORY
from scrapy_polite.settings import challenges
from scrapy_polite.settings import parsers as parse
from scrapy_polite.settings.parsers import MAX_SECONDS

#: A session's pin is forgotten after this long without a request (POLITE_STATE_PIN_TTL).
PIN_TTL = 3600.0
#: A host's shared record (learned limits, grants, last rate signal) lives this long after
#: its last use (POLITE_STATE_HOST_TTL).
HOST_TTL = 24 * 3600.0
#: Session ids per gateway template: each is an endpoint kept in memory and offered to every pin.
MAX_GATEWAY_SESSIONS = 10_000
#: Browser contexts the pool keeps open when neither POLITE_ nor PLAYWRIGHT_MAX_CONTEXTS says.
PLAYWRIGHT_CONTEXTS_DEFAULT = 16
#: Playwright's resource types that POLITE_PLAYWRIGHT_BLOCK may name (never "document": the page itself).
PLAYWRIGHT_RESOURCE_TYPES = (
    "stylesheet", "image", "media", "font", "script", "texttrack", "xhr", "fetch",
    "eventsource", "websocket", "manifest", "other",
)


@dataclass(frozen=True)
class Setting:
    """One ``POLITE_*`` setting: how its value is read and checked, its default, and its reference line."""

    name: str
    #: Reads the raw value (the default when unset) into the config's typed value, or raises PoliteConfigError.
    parse: Callable[[Setting, Any], Any]
    default: Any
    minimum: float | None = None
    maximum: float | None = None
    #: The values the setting (or each item of it) may take.
    choices: tuple[str, ...] = ()
    #: The default as the reference shows it, when it depends on other settings.
    shown: str | None = None
    #: One line on what the setting does; empty when it shares the row of the setting before it.
    doc: str = ""
    #: Documented on the reference row of the setting before it: the two are read together.
    joined: bool = False

    @property
    def field(self) -> str:
        """The :class:`~scrapy_polite.settings.config.PoliteConfig` attribute holding the value."""
        return self.name.removeprefix("POLITE_").lower()


@dataclass(frozen=True)
class ScrapySetting:
    """One of Scrapy's own settings the package reads, documented in the reference beside its own."""

    name: str
    shown: str
    doc: str


#: Every ``POLITE_*`` setting, in the order of the settings reference.
SETTINGS: tuple[Setting, ...] = (
    Setting("POLITE_HOST_BLOCKED", parse.choice, "give_up", choices=("wait", "give_up"),
            doc='What a host\'s requests do once every endpoint it may use (its top tier, with tiers) is benched for it by challenges or bans: `"give_up"` (given up, `polite/gave_up/host_blocked`, so a crawl whose other work is done finishes) or `"wait"` (they wait for the first bench to end). Either way one WARNING per block says when the first identity comes back.'),
    Setting("POLITE_ENABLED", parse.boolean, True,
            doc='Turn the whole package off without removing the add-on. `False` is Scrapy exactly as without the add-on: no component enabled, and `RETRY_HTTP_CODES`, `DOWNLOAD_DELAY`, AutoThrottle and the scheduler queue left as the project set them.'),
    Setting("POLITE_PROXIES", parse.proxies, [],
            doc='Proxy URLs (`http://` or `https://`). A URL without a scheme, such as `user:pass@host:port` as most providers list them, is taken as `http://` (as Scrapy\'s `add_http_if_no_scheme` does). An entry may be `{"url": ..., "exit_ip": "203.0.113.7"}` to give a static exit IP. A URL containing `{session}` is a gateway template. A string (from `-s` or Scrapyd) is split on commas and spaces, so a password holding `,` or a space must be percent-encoded there (`%2C`, `%20`); a piece that is not a whole proxy URL stops the crawl with an error naming the piece by its number, never its text.'),
    Setting("POLITE_PROXIES_FILE", parse.optional_text, None,
            doc='File of proxy URLs (UTF-8), one per line, `#` comments. Checked every `POLITE_PROXIES_FILE_CHECK_INTERVAL` (5 s). Added endpoints join the pool. Removed ones take no new requests, and their in-flight requests finish; the sessions pinned to one wait two check intervals for it to come back before `POLITE_SESSION_POLICY` applies. A file that cannot be read, is not UTF-8, has a bad line or lists no proxy keeps the current pool, with one ERROR naming the file and the line (never its content).'),
    Setting("POLITE_PROXIES_FILE_CHECK_INTERVAL", parse.decimal, 5.0, minimum=0.1,
            doc='Seconds between two checks of `POLITE_PROXIES_FILE` for changes; a changed file is re-read and the pool updated.'),
    Setting("POLITE_GATEWAY_SESSIONS", parse.integer, 10, minimum=1, maximum=MAX_GATEWAY_SESSIONS,
            doc='Session ids per gateway template, each one a virtual endpoint (one exit identity). At most 10,000.'),
    Setting("POLITE_HOST_CONCURRENCY", parse.integer, 2, minimum=1, maximum=100_000,
            doc='Requests in flight per host, across all endpoints (the starting value when adapting).'),
    Setting("POLITE_HOST_CONCURRENCY_MAX", parse.optional_integer, None, minimum=1, maximum=100_000, shown='same (×4 if adaptive)',
            doc="How far clean windows may raise a host's concurrency."),
    Setting("POLITE_ENDPOINT_CONCURRENCY", parse.integer, 1, minimum=1, maximum=10_000,
            doc='Requests in flight per endpoint.'),
    Setting("POLITE_DELAY", parse.seconds_range, (0.8, 1.6),
            doc='Spacing between two requests of one endpoint to one host, uniform in `(min, max)` seconds. A single number `d` means `(2d/3, 4d/3)`.'),
    Setting("POLITE_HOST_KEY", parse.choice, "slot", choices=("slot", "hostname"),
            doc='What the host cap groups by: `meta[\'download_slot\']` if set, else the hostname (`"slot"`), or always the hostname (`"hostname"`).'),
    Setting("POLITE_SESSION_POLICY", parse.choice, "fail", choices=("fail", "repin"),
            doc='When a session\'s endpoint dies, or stays out of the proxies file past its grace: `"fail"` fails its requests with `SessionEndpointLost`; `"repin"` moves the session with a warning and the `session_repinned` signal. A session lost to a removal runs again on its endpoint once the endpoint is back.'),
    Setting("POLITE_SESSION_COOKIEJAR", parse.boolean, True,
            doc="Give each session its own cookie jar (`meta['cookiejar']`) unless the request sets one."),
    Setting("POLITE_RATE_LIMIT_CODES", parse.some_status_codes, [429],
            doc='Statuses that are rate signals (at least one; `-s POLITE_RATE_LIMIT_CODES="429 420"` works too).'),
    Setting("POLITE_RETRY_AFTER_CODES", parse.status_codes, [503],
            doc='Statuses that are rate signals only when they carry `Retry-After`.'),
    Setting("POLITE_RETRY_AFTER_MAX", parse.decimal, 300.0, minimum=0.0,
            doc='Cap, in seconds, on any `Retry-After` and on a robots.txt `Crawl-delay`.'),
    Setting("POLITE_COOLDOWN", parse.seconds_range, (5.0, 10.0),
            doc='Cooldown in seconds, uniform, when there is no usable `Retry-After`.'),
    Setting("POLITE_RATE_RETRY_TIMES", parse.integer, 10, minimum=0,
            doc='Re-queues per request after rate signals. This budget is separate from `RETRY_TIMES`.'),
    Setting("POLITE_HOST_PAUSE_ENDPOINTS", parse.integer, 3, minimum=1,
            doc='This many distinct endpoints getting no answer from a host (timeouts, resets) within the window (seconds) blame the host, not the proxies: the host is slowed down, or parked (`POLITE_PARK_TIME`) when it keeps it up.'),
    Setting("POLITE_HOST_PAUSE_WINDOW", parse.decimal, 10.0, minimum=0.1,
            joined=True),
    Setting("POLITE_PARK_TIME", parse.positive_range, (60.0, 1800.0),
            doc='Seconds a host is parked when several endpoints get no answer from it, with a WARNING: the first park, doubling with each up to the second.'),
    Setting("POLITE_ADAPTIVE", parse.boolean, False,
            doc="Also search upward: a new host starts at the rate `POLITE_DELAY` gives the pool and climbs 1.5 times per round of one answer per IP until its first signal; each IP's spacing then follows the host rate down to `POLITE_DELAY_FLOOR`, and concurrency follows rate × latency. Without it, spacing never goes under `POLITE_DELAY`. See [The throttle](throttle.md)."),
    Setting("POLITE_DELAY_FLOOR", parse.decimal, 0.2, minimum=0.0,
            doc='The lowest spacing adaptive mode may use.'),
    Setting("POLITE_PROXY_RETRY_TIMES", parse.integer, 5, minimum=0,
            doc='Re-assignments to another endpoint after certain proxy failures (refused, unreachable, a CONNECT refused with any status but 429, 407).'),
    Setting("POLITE_TIMEOUT_RETRY_TIMES", parse.integer, 2, minimum=0,
            doc='Re-queues after failures that say nothing certain about the proxy: a timeout, a lost or reset connection, a truncated answer. Then the request is given up (`polite/gave_up/timeout`). Separate from the proxy budget and from `RETRY_TIMES`.'),
    Setting("POLITE_STALL_TIMEOUT", parse.decimal, 30.0, minimum=0.0,
            doc="Seconds after which a request still unanswered gives its host slot back, while its endpoint stays busy until the answer or `DOWNLOAD_TIMEOUT`, so a hanging proxy cannot hold a host's concurrency. `0` turns it off. It has no effect at or above `DOWNLOAD_TIMEOUT`. A slow host may then see more than `POLITE_HOST_CONCURRENCY` requests at once, if some take longer than this."),
    Setting("POLITE_ENDPOINT_BACKOFF", parse.positive_range, (2.0, 120.0),
            doc='Base and cap, in seconds, of the exponential backoff of a failing endpoint before it is re-checked.'),
    Setting("POLITE_ENDPOINT_MAX_FAILURES", parse.integer, 5, minimum=1,
            doc='Failures in a row that make an endpoint dead. A dead endpoint still gets one probe request per backoff cap, and a success brings it back. When every endpoint is dead, the spider closes with `polite_no_usable_endpoints`.'),
    Setting("POLITE_BAN_CODES", parse.status_codes, [403],
            doc='A ban answer benches that endpoint for that host only, and the request is tried elsewhere (up to twice).'),
    Setting("POLITE_BAN_DURATION", parse.decimal, 600.0, minimum=0.0,
            joined=True),
    Setting("POLITE_RESPONSE_POLICY", parse.policy_class, "scrapy_polite.downloader.response_policy.ResponsePolicy",
            doc="Class path (built with `from_crawler`) of the one component that decides what each answer means: `ok`, `rate_limited`, `challenge`, `ban`, `proxy_error` or `target_error`. The middleware, the throttle, the stats, the JSONL (`verdict`), tune trials and the report all act on its verdict. Subclass it and override `classify(request, response, **kw)` to judge a site's own pages. See [Challenges and tiers](challenges-and-tiers.md)."),
    Setting("POLITE_CHALLENGE_PATTERNS", challenges.patterns, challenges.DEFAULT_PATTERNS, shown='common CAPTCHA / JavaScript-check markers',
            doc='What makes an answer a challenge: a list of `{"header": name, "value": regex}` (e.g. `cf-mitigated: challenge`; `value` optional) and `{"status": [codes], "body": regex}` entries (`status` optional: any status; the first 64 KiB of the body are searched). Defaults: `cf-mitigated: challenge`, `x-amzn-waf-action: captcha\\|challenge`, a "verify you are human" / "Just a moment..." / `cf-chl-` / PerimeterX / DataDome body at any status, and a reCAPTCHA / hCaptcha / Turnstile / Incapsula body on a 403, 429 or 503 (ordinary pages carry those widgets and scripts too). Checked once at start-up.'),
    Setting("POLITE_CHALLENGE_BENCH", parse.decimal, 1800.0, minimum=0.0, maximum=MAX_SECONDS,
            doc='Seconds a challenged endpoint is benched for that host (longer than a 429 cooldown or a ban).'),
    Setting("POLITE_CHALLENGE_RETRY_TIMES", parse.integer, 3, minimum=0,
            doc='Re-queues after challenges, each through another endpoint, with a budget of their own.'),
    Setting("POLITE_PROXY_TIERS", parse.proxy_tiers, [],
            doc='Tiers of proxies, cheapest first: each a list of proxies (as in `POLITE_PROXIES`) or the path of a proxies file. `POLITE_PROXIES` (and its file), if set too, is tier 0. Without tiers the whole pool is one tier.'),
    Setting("POLITE_TIER_ESCALATE_AFTER", parse.integer, 3, minimum=1,
            doc='A host moves up a tier after this many challenges or bans on its current tier (or once every endpoint of that tier is benched for it), and steps back down after this many seconds without one.'),
    Setting("POLITE_TIER_COOLDOWN", parse.decimal, 600.0, minimum=0.0, maximum=MAX_SECONDS,
            joined=True),
    Setting("POLITE_SESSION_MAX_REQUESTS", parse.optional_integer, None, minimum=1,
            doc="Retire a session's identity after this many requests or seconds: its next request gets a new endpoint (another than the retired identity's, while the pool has one the host may use; a gateway endpoint gives a new session id) and a new cookie jar (`session_retired` signal). A challenge or ban retires it too."),
    Setting("POLITE_SESSION_MAX_AGE", parse.optional_decimal, None, minimum=0.1,
            joined=True),
    Setting("POLITE_LEASE_TIMEOUT", parse.optional_decimal, None, minimum=1.0, shown='`DOWNLOAD_TIMEOUT` + 60',
            doc='A lease (endpoint + host slot) held this long without an answer is released with a WARNING, so a request dropped by another component cannot hold an endpoint forever.'),
    Setting("POLITE_EXIT_IP_HEADERS", parse.text_list, ["X-Proxy-Exit-IP", "X-Exit-IP", "X-Outgoing-IP"],
            doc='Response headers that providers use to name the exit IP.'),
    Setting("POLITE_EXIT_IP_PROBE_URL", parse.http_url, None,
            doc='An IP-echo URL to probe through each endpoint at start-up, for the exit IP when no header says it.'),
    Setting("POLITE_EXIT_IP_PROBE_TIMEOUT", parse.decimal, 10.0, minimum=0.1,
            doc='Seconds per probe.'),
    Setting("POLITE_PROXY_ERROR_HEADERS", parse.text_list, ["X-Proxy-Error"],
            doc='Headers that mark a response as coming from the proxy, not the target: a 429 carrying one cools the endpoint, not the host.'),
    Setting("POLITE_STATS_JSONL", parse.output_path, None,
            doc='Path for one JSON line per request attempt. The file is size-capped by `POLITE_STATS_JSONL_MAX_BYTES` (100 MiB) and rotated to `.1`. Placeholders as in `FEEDS` URIs: `%(name)s` (spider name), `%(time)s` (start time, UTC, as in `FEEDS`), `%(job)s` (Scrapyd\'s job id, its `_job` spider argument, which `FEEDS` spells `%(_job)s`; the process id outside Scrapyd) and any spider attribute or argument, e.g. `"logs/%(name)s-%(job)s.jsonl"`, so that concurrent jobs write and rotate files of their own. An unknown placeholder stops the crawl at start-up.'),
    Setting("POLITE_STATS_JSONL_MAX_BYTES", parse.integer, 100 * 1024 * 1024, minimum=1024, maximum=2**62,
            doc="Size in bytes at which the `POLITE_STATS_JSONL` file is rotated to `.1` (one rotated file is kept), so a long crawl's attempt records stay bounded."),
    # A path in a writable directory too: checked once POLITE_STATS_JSONL, which it needs, is known.
    Setting("POLITE_REPORT_HTML", parse.optional_text, None,
            doc='Path of an HTML report written at spider close from the run\'s `POLITE_STATS_JSONL` file (its rotated `.1` first), with the same placeholders, e.g. `"logs/%(name)s-%(job)s.html"`. Needs `POLITE_STATS_JSONL`: without it, or with an unknown placeholder, the crawl stops at start-up.'),
    Setting("POLITE_STATS_TOP", parse.integer, 50, minimum=1, maximum=100_000,
            doc='Hosts and endpoints with stats keys (`polite/host/<host>/…`, `polite/endpoint/<endpoint>/…`, `polite/throttle/<host>/…`) and Prometheus series of their own: the ones with the most attempts at the end (for Prometheus and the throttle keys, the first ones seen). The rest are summed under `(other)`; `polite/hosts_folded` and `polite/endpoints_folded` count the names folded. Per-host latency percentiles are kept for the first this many hosts only.'),
    Setting("POLITE_STATS_SESSIONS_MAP", parse.integer, 1000, minimum=0,
            doc='Sessions listed in the `polite/sessions_map` stat at the end of a crawl (by session key; 0 leaves the stat out). `polite/sessions_map_left_out` counts the rest.'),
    Setting("POLITE_HOST_MEMORY", parse.integer, HOST_MEMORY, minimum=0, maximum=100_000_000,
            doc="Idle hosts whose learned limits (concurrency, spacing band, `Crawl-delay`, host rate, the throttle's findings) are kept after their live state is dropped, least recently used first out; 0 keeps none. A host seen again resumes from them if they are younger than `POLITE_STATE_PIN_TTL`, else from the configured defaults."),
    Setting("POLITE_STATS_WINDOW", parse.decimal, 60.0, minimum=1.0,
            doc='Seconds in the sliding window for "pages/min now".'),
    Setting("POLITE_LOG_INTERVAL", parse.decimal, 60.0, minimum=0.0,
            doc='Seconds between progress log lines (0 turns them off).'),
    Setting("POLITE_PROMETHEUS_PORT", parse.optional_integer, None, minimum=0, maximum=65535,
            doc='Port 0–65535 (0: a free one) and address to serve Prometheus metrics (`pip install scrapy-polite[prometheus]`). Off by default.'),
    Setting("POLITE_PROMETHEUS_ADDRESS", parse.listen_address, "127.0.0.1",
            joined=True),
    Setting("POLITE_STATE", parse.state, "memory",
            doc='Where the gates keep their state. `"redis://host:6379/0"` shares it with every process that uses the same Redis and namespace (see [Several processes](redis.md)). Unreachable at start-up: the crawl stops with an error. A password goes in the URL (`redis://:pass@host:6379/0`, or `?password=pass`); wherever the URL is shown (errors, logs, the `fleet` command), it is masked as `***`.'),
    Setting("POLITE_STATE_NAMESPACE", parse.text, "polite",
            doc='Key prefix in Redis. Processes that share a pool and targets use the same one; unrelated fleets use different ones.'),
    Setting("POLITE_STATE_LEASE_TTL", parse.decimal, 5.0, minimum=1.0,
            doc='Seconds a lease lives in Redis without renewal (renewed every third of that while its request is in flight). A killed process frees its endpoints and host slots within this time.'),
    Setting("POLITE_STATE_PIN_TTL", parse.decimal, PIN_TTL, minimum=1.0,
            doc="Seconds a session's pin to an endpoint lives in Redis after its last request. The process that ran the session keeps its own pin; after this long, another process that takes up the session may pin it anew. Set it above the longest pause between two steps of one session."),
    Setting("POLITE_STATE_HOST_TTL", parse.decimal, HOST_TTL, minimum=1.0,
            doc="Seconds a host's shared record in Redis (its learned concurrency, delay band, interval, grant count and last rate signal) lives after the host's last grant or change. A host crawled again within this time starts from what the fleet learned; after it, from the defaults."),
    Setting("POLITE_STATE_POLL", parse.decimal, 0.05, minimum=0.005, maximum=5.0,
            doc="Seconds between grant attempts while a host's slots or an endpoint are held by another process."),
    Setting("POLITE_PLAYWRIGHT_MAX_CONTEXTS", parse.optional_integer, None, minimum=1, maximum=100_000, shown=f"`PLAYWRIGHT_MAX_CONTEXTS`, else `{PLAYWRIGHT_CONTEXTS_DEFAULT}`",
            doc="Browser contexts the pool keeps open for rendered requests (one per endpoint, one per session). At a new one beyond it, the least recently used idle context is closed (a session's cookies and storage are saved and handed to the context that replaces it). At most `PLAYWRIGHT_MAX_CONTEXTS`. See [Browser rendering](rendering.md#browser-rendering-scrapy-playwright)."),
    Setting("POLITE_PLAYWRIGHT_BLOCK", parse.choices, [], choices=PLAYWRIGHT_RESOURCE_TYPES,
            doc='Playwright resource types a rendered page may not fetch (`"image"`, `"stylesheet"`, `"font"`, `"media"`, `"script"`, `"xhr"`, `"fetch"`, `"websocket"`, ...; never `"document"`). They are aborted in the browser and never reach the site. Combined with your own `PLAYWRIGHT_ABORT_REQUEST`.'),
    Setting("POLITE_STATE_OUTAGE_TIMEOUT", parse.decimal, 300.0, minimum=0.0,
            doc='Seconds Redis may stay unreachable mid-crawl before the spider closes with `polite_state_unreachable` (0: wait for it forever).'),
)

#: Scrapy's own settings the package reads, documented after the package's.
SCRAPY_SETTINGS: tuple[ScrapySetting, ...] = (
    ScrapySetting("DOWNLOAD_SLOTS", '`{}`',
                  doc="Per-host overrides, keyed like the host cap (`meta['download_slot']` or the hostname): `concurrency` replaces `POLITE_HOST_CONCURRENCY` for that host and is also the most the throttle grows it to; `delay` replaces `POLITE_DELAY`, spanning 0.5–1.5 times the delay with `randomize_delay` (default `RANDOMIZE_DOWNLOAD_DELAY`), exactly the delay without it, or (1−j)–(1+j) times it with `jitter` j. Precedence: the `DOWNLOAD_SLOTS` entry for that key, then the `POLITE_*` defaults; the throttle adapts from there (down on rate signals, back up to it on clean windows). Scrapy's own slot delay for those hosts is set to 0, as `DOWNLOAD_DELAY` is, since the gates space them already. A bad entry stops the crawl at start-up with an error naming it."),
)

#: The table by setting name.
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}

#: Settings of the throttle it replaced, no longer read, and what took their place.
RETIRED: dict[str, str] = {
    "POLITE_BACKOFF_FACTOR": "a cut is the throttle's law (docs/throttle.md)",
    "POLITE_RECOVERY_WINDOW": "recovery and its holds follow from the site's answers (docs/throttle.md)",
    "POLITE_PARK_AFTER": "a host is parked when several endpoints get no answer (POLITE_PARK_TIME)",
}
