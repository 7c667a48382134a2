"""The proxy pool: endpoints and the proxies file, sessions, what is remembered of evicted hosts."""
