"""One ``scrapy polite-tune`` trial run as a child ``scrapy crawl``, and the result it leaves behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from scrapy_polite.tune.trial import FILE_SETTING, REQUESTS_SETTING
from scrapy_polite.tune.values import Trial, TrialResult

#: A trial still running this long after --trial-seconds is killed.
KILL_AFTER = 60.0


class TrialRunner:
    """Runs one trial as a child ``scrapy crawl`` process and reads its result file.

    Why a child process per trial, not ``CrawlerProcess`` in this one: a
    Twisted reactor cannot be restarted, so sequential crawls in one process
    need ``CrawlerRunner`` chains on one reactor, and the asyncio reactor,
    the add-on's start-up checks and module-level state of the user's
    project (spiders, middlewares, extensions) would then be shared from one
    trial to the next. A child starts fresh every time, is exactly the crawl
    the user runs (``scrapy crawl`` with the project's settings, their
    ``-s`` and ``-a``, plus the trial's), works in any project and with any
    reactor setting, and can be killed if it hangs without taking the
    command down with it. The cost is Scrapy's start-up time per trial,
    which is not counted in the trial's pages/min.
    """

    def __init__(
        self,
        spider: str,
        spargs: list[str],
        user_settings: list[str],
        trial_seconds: float,
        workdir: Path,
    ) -> None:
        self.spider = spider
        self.spargs = list(spargs)
        self.user_settings = list(user_settings)
        self.trial_seconds = trial_seconds
        self.workdir = workdir
        self.last_log: Path | None = None
        self.last_result: TrialResult | None = None
        #: Index of the last trial whose process was started.
        self.started = 0

    def command(self, trial: Trial) -> list[str]:
        n = trial.index
        overrides: dict[str, str] = {
            **trial.settings.settings(),
            "POLITE_ADAPTIVE": "False",
            FILE_SETTING: str(self.workdir / f"trial-{n}.json"),
            REQUESTS_SETTING: str(trial.allowance),
            "CLOSESPIDER_TIMEOUT": f"{self.trial_seconds:g}",
            "POLITE_STATS_JSONL": str(self.workdir / f"trial-{n}.jsonl"),
            # A trial measures the site: no cache in front of it, no state carried over between trials,
            # nothing stored. The log goes to stderr, which is kept in trial-N.log.
            "HTTPCACHE_ENABLED": "False",
            "JOBDIR": "",
            "FEEDS": "{}",
            "ITEM_PIPELINES": "{}",
            "LOG_FILE": "",
        }
        cmd = [sys.executable, "-m", "scrapy", "crawl", self.spider]
        for arg in self.spargs:
            cmd += ["-a", arg]
        for setting in self.user_settings:
            cmd += ["-s", setting]
        for name, value in overrides.items():
            cmd += ["-s", f"{name}={value}"]
        return cmd

    def run(self, trial: Trial) -> tuple[TrialResult, float]:
        """The trial's result and when its last Retry-After window closes (wall time)."""
        n = trial.index
        result_path = self.workdir / f"trial-{n}.json"
        log_path = self.workdir / f"trial-{n}.log"
        result_path.unlink(missing_ok=True)
        (self.workdir / f"trial-{n}.jsonl").unlink(missing_ok=True)
        self.last_log = log_path
        self.last_result = None
        error: str | None = None
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(self.command(trial), stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
            self.started = n
            try:
                rc = proc.wait(timeout=self.trial_seconds + KILL_AFTER)
            except subprocess.TimeoutExpired:
                error = f"still running {self.trial_seconds + KILL_AFTER:g} s after it started; killed"
                _stop(proc)
                rc = proc.returncode
            except KeyboardInterrupt:
                # The child got the same Ctrl-C: let it write its result.
                try:
                    proc.wait(timeout=30)
                except (subprocess.TimeoutExpired, KeyboardInterrupt):
                    _stop(proc)
                self.last_result = _read_result(result_path)[0]
                raise
        result, cooldown_until = _read_result(result_path)
        if result is None:
            result = TrialResult(sent=None, error=error or f"no result (exit code {rc}), see {log_path.name}")
        elif error is not None:
            result.error = error
        return result, cooldown_until


def _read_result(path: Path) -> tuple[TrialResult | None, float]:
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return TrialResult.from_trial_file(data), float(data.get("cooldown_until") or 0.0)
    except (OSError, ValueError, KeyError, TypeError):
        return None, 0.0


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def log_tail(path: Path, lines: int = 15) -> str:
    """The last lines of a trial's log, indented for the command's output."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return "\n".join("    | " + line for line in text)
