"""The session gateway: one proxy address whose Basic-auth username picks a sticky exit IP."""

from __future__ import annotations

import random
from typing import Any

from .common import JsonlLog
from .config import ProxyConfig
from .http import Request
from .proxy import ProxyServer, basic_credentials, nth_address


class GatewayServer(ProxyServer):
    """Rotating gateway: the Basic-auth username picks a sticky exit IP."""

    kind = "gateway"

    def __init__(self, config: ProxyConfig, log: JsonlLog, deadline: float, rng: random.Random) -> None:
        super().__init__(config, "gateway", config.gateway_first_source, log, deadline)
        self.pool = [nth_address(config.gateway_first_source, i) for i in range(config.gateway_pool)]
        self.sessions: dict[str, str] = {}
        self._usage = {ip: 0 for ip in self.pool}
        self._rng = rng
        self.prefix = config.auth[0] if config.auth else "user"

    @property
    def password(self) -> str:
        """Password used in the template (any value works without auth)."""
        return self.config.auth[1] if self.config.auth else "pass"

    @property
    def url(self) -> str:
        """Gateway URL without a session (a fresh random exit per request)."""
        return f"http://{self.prefix}:{self.password}@{self.host}:{self.port}"

    @property
    def template(self) -> str:
        """Gateway URL with a ``{session}`` placeholder in the username."""
        return f"http://{self.prefix}-session-{{session}}:{self.password}@{self.host}:{self.port}"

    def _session_of(self, req: Request) -> tuple[bool, str | None]:
        cred = basic_credentials(req)
        auth = self.config.auth
        if cred is None:
            return auth is None, None
        user, password = cred
        if auth is not None and password != auth[1]:
            return False, None
        marker = f"{self.prefix}-session-"
        if user.startswith(marker) and len(user) > len(marker):
            return True, user[len(marker) :]
        if user == self.prefix:
            return True, None
        return auth is None, None

    def check_auth(self, req: Request) -> bool:
        """Valid password and a username of the form ``<prefix>[-session-<id>]``."""
        return self._session_of(req)[0]

    def choose_exit(self, req: Request) -> tuple[str, str | None]:
        """Sticky exit per session id; a random one without a session."""
        _, session = self._session_of(req)
        if session is None:
            return self._rng.choice(self.pool), None
        ip = self.sessions.get(session)
        if ip is None:
            ip = min(self.pool, key=lambda a: self._usage[a])
            self._usage[ip] += 1
            self.sessions[session] = ip
        return ip, session

    def state(self) -> dict[str, Any]:
        """Session map for the control API."""
        return {"sessions": dict(self.sessions), "mode": self.mode}
