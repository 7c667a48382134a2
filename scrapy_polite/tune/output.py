"""What ``scrapy polite-tune`` prints for a trial and for its recommendation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_polite.tune.values import num_text

if TYPE_CHECKING:
    from scrapy_polite.tune.values import Trial, TrialSettings


HEADER = (
    f"{'#':>2}  {'change':<26} {'host conc.':>10} {'delay (s)':>11} {'requests':>8} {'ok':>5} {'429':>4} "
    f"{'403':>4} {'pages/min':>9} {'429 rate':>8} {'P95':>8}  verdict"
)


def format_row(trial: Trial) -> str:
    """One table row: counts of the whole trial, pages/min, the 429 rate of paced answers, P95."""
    r = trial.result
    s = trial.settings
    head = f"{trial.index:>2}  {trial.change:<26} {s.host_concurrency:>10} {s.delay_text():>11} "
    if r is None or r.sent is None:
        sent = "?" if r is None else f"<={trial.allowance}"
        return head + f"{sent:>8} {'-':>5} {'-':>4} {'-':>4} {'-':>9} {'-':>8} {'-':>8}  {trial.verdict or 'failed'}"
    p95 = f"{r.p95:.3f}s" if r.p95 is not None else "-"
    return head + (
        f"{r.sent:>8} {r.success:>5} {r.rate_limited:>4} {r.status_403:>4} {r.pages_per_min:>9.1f} "
        f"{r.rate_429 * 100:>7.1f}% {p95:>8}  {trial.verdict}"
    )


def settings_lines(settings: TrialSettings, endpoint_concurrency: int) -> list[str]:
    """The recommended ``settings.py`` lines."""
    return [
        f"POLITE_HOST_CONCURRENCY = {settings.host_concurrency}",
        f"POLITE_ENDPOINT_CONCURRENCY = {endpoint_concurrency}",
        f"POLITE_DELAY = ({num_text(settings.delay[0])}, {num_text(settings.delay[1])})",
    ]
