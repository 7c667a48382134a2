"""The scheduler priority queue that asks the gate which host is least loaded."""
