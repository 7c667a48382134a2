"""The end-of-run text table of a summary (one crawl's or the fleet's merged one)."""

from __future__ import annotations

from typing import Any


def format_summary(s: dict[str, Any]) -> str:
    """A readable end-of-run table per host and per endpoint."""

    def sec(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}s"

    def others(statuses: dict[str, int]) -> str:
        rest = {k: v for k, v in statuses.items() if k not in {"200", "429", "403"}}
        return ", ".join(f"{k}: {v}" for k, v in sorted(rest.items())) or "-"

    attempts = s["attempts"]
    pct = 100.0 * s["rate_limited"] / attempts if attempts else 0.0
    exc = ", ".join(f"{k} {v}" for k, v in sorted(s["exceptions"].items())) or "none"
    sources = ", ".join(f"{k} {v}" for k, v in sorted(s["exit_ip_sources"].items())) or "-"
    challenges = f", challenges {s['challenges']}" if s.get("challenges") else ""
    lines = [
        f"  {s['success']} successful pages of {attempts} attempts in {s.get('elapsed', 0):.1f} s: "
        f"{s['pages_per_min']:.1f} pages/min (last window {s['pages_per_min_window']:.1f}), "
        f"success rate {(s['success_rate'] or 0) * 100:.1f}%",
        f"  rate-limited {s['rate_limited']} ({pct:.1f}%), 403 bans {s['bans']}{challenges}, "
        f"gave up {s['gave_up']}, exceptions: {exc}",
        f"  download latency P50 {sec(s['latency_p50'])} P95 {sec(s['latency_p95'])} "
        f"P99 {sec(s['latency_p99'])}; gate wait P50 {sec(s['wait_p50'])} P95 {sec(s['wait_p95'])}",
        f"  {s['exit_ips']} exit IPs (source: {sources})",
        "",
    ]
    hosts = s["hosts"]
    w = max([len("host"), *(len(h) for h in hosts)])
    lines.append(
        f"  {'host':<{w}} {'attempts':>8} {'ok':>7} {'429':>6} {'403':>5} {'exit IPs':>8} "
        f"{'P50':>8} {'P95':>8} {'P99':>8}  other"
    )
    for host, h in sorted(hosts.items()):
        st = h["statuses"]
        lines.append(
            f"  {host:<{w}} {h['attempts']:>8} {h['success']:>7} {st.get('429', 0):>6} {st.get('403', 0):>5} "
            f"{h['exit_ips']:>8} {sec(h['latency_p50']):>8} {sec(h['latency_p95']):>8} "
            f"{sec(h['latency_p99']):>8}  {others(st)}"
        )
    eps = s["endpoints"]
    if eps:
        w = max([len("endpoint"), *(len(e) for e in eps)])
        lines += ["", f"  {'endpoint':<{w}} {'attempts':>8} {'ok':>7} {'429':>6} {'403':>5}  other"]
        for ep, e in sorted(eps.items()):
            st = e["statuses"]
            lines.append(
                f"  {ep:<{w}} {e['attempts']:>8} {e['success']:>7} {st.get('429', 0):>6} "
                f"{st.get('403', 0):>5}  {others(st)}"
            )
    return "\n".join(lines)
