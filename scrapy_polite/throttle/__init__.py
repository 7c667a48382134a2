"""The adaptive throttle: each host's concurrency and spacing learned from its answers."""
