-- A rate signal from a host (a cooldown after its 429), timed fleet-wide: a
-- throttle that saw none must not step the host's limit back up within its
-- recovery window. ARGV: host key, idle ttl. Returns the time.
local now = clock()
redis.call('HSET', ARGV[1], 'last_signal', tostring(now))
keep(ARGV[1], tonumber(ARGV[2]))
return tostring(now)
