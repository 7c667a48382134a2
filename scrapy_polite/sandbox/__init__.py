"""A local stand-in for a defended website and a proxy provider.

One separate OS process (pure asyncio, HTTP/1.1 keep-alive) serves target
sites on distinct loopback addresses, a fleet of forward proxies each
exiting from its own source IP, a sticky session gateway and a control
API. Used by the package's tests, demo and benchmarks, and by users to
try settings against realistic rate limits without touching a real site.
"""

from __future__ import annotations

from .client import Sandbox, SandboxError, read_access_log
from .config import FailureSpec, ProxyConfig, SandboxConfig, SiteConfig
from .scenarios import SCENARIOS

__all__ = [
    "SCENARIOS",
    "FailureSpec",
    "ProxyConfig",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "SiteConfig",
    "read_access_log",
]
