"""The gate whose state lives in Redis, shared by every crawler process of a fleet."""
