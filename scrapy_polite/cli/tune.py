"""``scrapy polite-tune <spider>``: find POLITE_DELAY and POLITE_HOST_CONCURRENCY for a site.

The search itself (what to try next, what to recommend) is in
:mod:`scrapy_polite.tune.tuner`; the crawl side of a trial (its request
allowance, its stop on the first ban, its result file) is in
:mod:`scrapy_polite.tune.trial`, and the child process that runs it in
:mod:`scrapy_polite.tune.runner`. This module is the command around them: checks
of the project, running the trials and printing the table; its options are in
:mod:`scrapy_polite.cli.tune_options`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError
from scrapy.utils.conf import arglist_to_dict

from scrapy_polite.cli import enables_addon
from scrapy_polite.cli.tune_options import OPTIONS
from scrapy_polite.errors import PoliteConfigError
from scrapy_polite.tune.findings import host_limit_finding
from scrapy_polite.tune.output import HEADER, format_row, settings_lines
from scrapy_polite.tune.runner import TrialRunner, log_tail
from scrapy_polite.tune.trial import FILE_SETTING, REQUESTS_SETTING
from scrapy_polite.tune.tuner import Tuner
from scrapy_polite.tune.values import TrialResult, TrialSettings

#: Settings each trial sets itself; giving them with -s would be silently overridden.
TUNED = (
    "POLITE_HOST_CONCURRENCY",
    "POLITE_HOST_CONCURRENCY_MAX",
    "POLITE_DELAY",
    "POLITE_ADAPTIVE",
    FILE_SETTING,
    REQUESTS_SETTING,
)


class Command(ScrapyCommand):
    requires_project = True
    # Trials run in child processes: this process needs no reactor (Scrapy >= 2.14 honours it).
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "[options] <spider>"

    def short_desc(self) -> str:
        return "Find POLITE_DELAY and POLITE_HOST_CONCURRENCY for a site with short, bounded trial crawls"

    def long_desc(self) -> str:
        return (
            "Run short trial crawls of <spider> against its real target, changing one variable at a "
            "time: POLITE_DELAY down (or up while there are too many 429s), then "
            "POLITE_HOST_CONCURRENCY up, from host concurrency 2, one request per endpoint and "
            "0.8-1.6 s of delay. Each trial is a `scrapy crawl` with your settings plus the trial's. "
            "Prints successful pages/min, 429 rate and P95 of every trial, then the recommended "
            "settings.py lines. Stops at the first 403 (ban) and never sends more than --budget "
            "requests in all. Trials run without item pipelines and feed exports."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("-a", dest="spargs", action="append", default=[], metavar="NAME=VALUE",
                            help="spider argument, passed to every trial (may be repeated)")
        group = parser.add_argument_group(title="Tuning")
        for flag, metavar, default, _, help_text in OPTIONS:
            group.add_argument(flag, metavar=metavar, default=default, help=help_text)
        group.add_argument("--logs", metavar="DIR", default=None,
                           help="keep each trial's log, stats JSONL and result in DIR")

    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)
        try:
            arglist_to_dict(opts.spargs)
        except ValueError:
            raise UsageError("Invalid -a value, use -a NAME=VALUE", print_help=False) from None
        clashing = sorted({s.split("=", 1)[0] for s in opts.set} & set(TUNED))
        if clashing:
            raise UsageError(
                f"{', '.join(clashing)} is set by each trial; use --start-delay / --start-concurrency "
                "to choose where the search starts", print_help=False,
            )
        for flag, _, _, read, _ in OPTIONS:
            dest = flag[2:].replace("-", "_")
            if getattr(opts, dest) is not None:
                setattr(opts, dest, read(flag, getattr(opts, dest)))
        if opts.max_concurrency is not None and opts.max_concurrency < opts.start_concurrency:
            raise UsageError(
                f"--max-concurrency {opts.max_concurrency} is below --start-concurrency "
                f"{opts.start_concurrency}", print_help=False,
            )
        if opts.budget < opts.trial_requests:
            raise UsageError(
                f"--budget {opts.budget} is smaller than one trial (--trial-requests {opts.trial_requests}); "
                "give a budget of several trials", print_help=False,
            )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        from scrapy.utils.project import inside_project

        if len(args) != 1:
            raise UsageError("give exactly one spider name" if args else "", print_help=not args)
        if not inside_project():
            raise UsageError("run it inside a Scrapy project (a directory with scrapy.cfg)", print_help=False)
        spider = args[0]
        assert self.settings is not None
        endpoints, endpoint_concurrency = _check_project(self.settings, spider)
        max_concurrency = opts.max_concurrency or max(
            opts.start_concurrency,
            min(endpoints * endpoint_concurrency,
                _spider_settings(self.settings, spider).getint("CONCURRENT_REQUESTS", 16)),
        )
        tuner = Tuner(
            TrialSettings(opts.start_concurrency, opts.start_delay),
            budget=opts.budget,
            trial_requests=opts.trial_requests,
            max_429_rate=opts.max_429_rate,
            min_gain=opts.min_gain,
            max_concurrency=max_concurrency,
        )
        out = _Printer()
        out(
            f"scrapy-polite tune: spider {spider!r}, {endpoints} endpoint(s), "
            f"{endpoint_concurrency} request(s) per endpoint"
        )
        out(
            f"budget {opts.budget} requests; trials of at most {opts.trial_requests} requests or "
            f"{opts.trial_seconds:g} s; acceptable: no 403, 429 rate <= {opts.max_429_rate * 100:g}%"
        )
        out(
            "429 rate: among answers after each endpoint's first one (those leave together at start-up, "
            "with no delay before them)"
        )
        out("")
        with tempfile.TemporaryDirectory(prefix="polite-tune-") as tmp:
            workdir = Path(opts.logs).resolve() if opts.logs else Path(tmp)
            workdir.mkdir(parents=True, exist_ok=True)
            runner = TrialRunner(spider, opts.spargs, opts.set, opts.trial_seconds, workdir)
            self.exitcode = _search(tuner, runner, out)
        if opts.logs:
            out(f"Trial logs, stats JSONL and results: {workdir}")
        best = tuner.recommendation()
        if best is not None and best.result is not None:
            r = best.result
            out("")
            out(
                f"Recommended settings.py lines (trial {best.index}: {r.pages_per_min:.1f} successful "
                f"pages/min, 429 rate {r.rate_429 * 100:.1f}%"
                + (f", P95 {r.p95:.3f}s" if r.p95 is not None else "") + "):"
            )
            settings = tuner.recommended_settings() or best.settings
            if settings.delay != best.settings.delay:
                out(
                    f"(POLITE_DELAY is the spacing the throttle widened trial {best.index}'s "
                    f"{best.settings.delay_text()} s to after its 429s; the search ended before trying it.)"
                )
            out("")
            for line in settings_lines(settings, endpoint_concurrency):
                out(line)
        else:
            out("")
            out(
                "No trial met the limits (no 403, 429 rate <= "
                f"{opts.max_429_rate * 100:g}%, some successful pages): no recommendation."
            )
            self.exitcode = 1
        _host_limit_note(tuner, out)


def _host_limit_note(tuner: Tuner, out: _Printer) -> None:
    """Say whether the throttle met a host-wide limit, and how sure that is."""
    finding = host_limit_finding(tuner.trials)
    if finding:
        out("")
        out(finding)


def _search(tuner: Tuner, runner: TrialRunner, out: _Printer) -> int:
    """Run trials until the tuner stops; print a row per trial. Returns the exit code."""
    out(HEADER)
    cooldown_until = 0.0
    interrupted = False
    while True:
        trial = tuner.next_trial()
        if trial is None:
            break
        try:
            wait = cooldown_until - time.time()
            if wait > 0:
                # Retry-After windows of the last trial still open: a new process knows nothing of them.
                if wait >= 2:
                    out(f"    (waiting {wait:.0f} s for the site's Retry-After windows to close)")
                time.sleep(wait)
            result, cooldown_until = runner.run(trial)
        except KeyboardInterrupt:
            interrupted = True
            if runner.last_result is not None:
                result = runner.last_result
            else:
                # Never started: nothing sent. Started without a result: its whole allowance counts.
                result = TrialResult(sent=None if runner.started == trial.index else 0)
            result.error = "interrupted"
        tuner.record(trial, result)
        if interrupted:
            trial.verdict = "interrupted"
            tuner.stopped = "interrupted"
            out(format_row(trial))
            break
        out(format_row(trial))
        if (result.error is not None or trial.verdict in ("no answers", "no pages")) and runner.last_log:
            out(log_tail(runner.last_log))
    out("")
    out(f"Used {tuner.used} of {tuner.budget} requests in {len(tuner.trials)} trial(s). Stopped: {tuner.stopped}.")
    return 130 if interrupted else (1 if any(t.result and t.result.error for t in tuner.trials) else 0)


def _spider_settings(settings: Any, spider: str) -> Any:
    """The settings a crawl of *spider* starts from: the project's, ``-s`` and its ``custom_settings``.

    A spider that enables the add-on or lists its proxies in ``custom_settings`` is checked
    (and tuned) as its crawls run.
    """
    from scrapy.utils.misc import load_object

    loader = load_object(settings["SPIDER_LOADER_CLASS"]).from_settings(settings.frozencopy())
    if spider not in loader.list():
        raise UsageError(f"Spider not found: {spider}", print_help=False)
    merged = settings.copy()
    loader.load(spider).update_settings(merged)
    return merged


def _check_project(settings: Any, spider: str) -> tuple[int, int]:
    """Fail early, with a clear message, on what would make every trial fail.

    Returns the number of endpoints and POLITE_ENDPOINT_CONCURRENCY.
    """
    from scrapy_polite.settings.config import PoliteConfig

    settings = _spider_settings(settings, spider)
    if not enables_addon(settings):
        raise UsageError(
            "the project does not enable scrapy-polite, nor does the spider's custom_settings: add "
            "ADDONS = {'scrapy_polite.Addon': 500} to either",
            print_help=False,
        )
    try:
        config = PoliteConfig.from_settings(settings)
    except PoliteConfigError as exc:
        raise UsageError(str(exc), print_help=False) from None
    if not config.enabled:
        raise UsageError("POLITE_ENABLED is False: there is nothing to tune", print_help=False)
    return len(config.endpoints), config.endpoint_concurrency


class _Printer:
    """Prints to stdout at once, so the table grows while trials run."""

    def __call__(self, line: str) -> None:
        print(line, flush=True)
