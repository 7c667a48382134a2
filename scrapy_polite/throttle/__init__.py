"""The adaptive throttle: each host's per-IP spacing, host rate and concurrency, learned from its answers."""
