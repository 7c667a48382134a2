"""Named presets for tests, demos and trying settings by hand."""

from __future__ import annotations

from collections.abc import Callable

from .config import ProxyConfig, SandboxConfig, SiteConfig
from .proxy import nth_address


def unlimited() -> SandboxConfig:
    """No limits at all: a baseline for throughput."""
    return SandboxConfig(sites=[SiteConfig(name="a")], proxies=ProxyConfig(count=8))


def per_ip() -> SandboxConfig:
    """Per-IP 1 req/s (burst 1), one request in flight per IP, Retry-After 2."""
    site = SiteConfig(name="a", per_ip_rate=1.0, per_ip_burst=1, per_ip_max_inflight=1, retry_after=2)
    return SandboxConfig(sites=[site], proxies=ProxyConfig(count=8))


def host_cap() -> SandboxConfig:
    """Host-wide 3 req/s whatever the number of exit IPs."""
    site = SiteConfig(name="a", host_rate=3.0, host_burst=1, retry_after=2)
    return SandboxConfig(sites=[site], proxies=ProxyConfig(count=8))


def shifting() -> SandboxConfig:
    """Host-wide cap that drops from 6 to 2 req/s at 20 s and recovers at 40 s."""
    site = SiteConfig(name="a", host_rate_schedule=[[0, 6.0], [20, 2.0], [40, 6.0]], retry_after=2)
    return SandboxConfig(sites=[site], proxies=ProxyConfig(count=8))


def gateway() -> SandboxConfig:
    """Login flows whose sessions are bound to the exit IP, via a sticky gateway."""
    site = SiteConfig(name="a", per_ip_rate=2.0, per_ip_burst=2, latency=[0.01, 0.05])
    return SandboxConfig(sites=[site], proxies=ProxyConfig(count=4, gateway=True, gateway_pool=16))


def multi_host() -> SandboxConfig:
    """Three sites with different per-IP limits (2, 1 and 0.5 req/s)."""
    sites = [
        SiteConfig(name="fast", per_ip_rate=2.0, per_ip_burst=1),
        SiteConfig(name="medium", per_ip_rate=1.0, per_ip_burst=1),
        SiteConfig(name="slow", per_ip_rate=0.5, per_ip_burst=1, retry_after=4),
    ]
    return SandboxConfig(sites=sites, proxies=ProxyConfig(count=8))


def ladder() -> SandboxConfig:
    """Per-IP 1 req/s; an IP that ignores the 429s gets challenges, then a block; proxies 2 and 3
    are burned for the first 30 s; proxies 6 and 7 make an expensive tier (``POLITE_PROXY_TIERS``)."""
    burned = [nth_address(ProxyConfig().first_source, i) for i in (2, 3)]
    site = SiteConfig(name="a", per_ip_rate=1.0, per_ip_burst=1, retry_after=3.0, challenge_after=2,
                      strikes_to_block=6, flagged_ips=burned, flag_time=30.0, latency=[0.01, 0.05])
    return SandboxConfig(sites=[site], proxies=ProxyConfig(count=8, gateway=False))


def demo() -> SandboxConfig:
    """60-page catalogue, per-IP 1 req/s, 20-80 ms latency, 8 proxies and a gateway."""
    site = SiteConfig(name="shop", pages=60, per_ip_rate=1.0, per_ip_burst=1, latency=[0.02, 0.08])
    return SandboxConfig(sites=[site], proxies=ProxyConfig(count=8, gateway=True))


SCENARIOS: dict[str, Callable[[], SandboxConfig]] = {
    "unlimited": unlimited,
    "per-ip": per_ip,
    "host-cap": host_cap,
    "shifting": shifting,
    "gateway": gateway,
    "multi-host": multi_host,
    "ladder": ladder,
    "demo": demo,
}
