-- A host-wide rate signal from a host (a 429 blamed on the host, or a challenge),
-- timed fleet-wide: a throttle that saw none must not step the host's rate back up
-- within its hold. ARGV: host key, idle ttl. Returns the time.
local now = clock()
redis.call('HSET', ARGV[1], 'last_signal', tostring(now))
keep(ARGV[1], tonumber(ARGV[2]))
return tostring(now)
