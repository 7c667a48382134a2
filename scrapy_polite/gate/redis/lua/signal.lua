-- A host-wide rate signal from a host (a 429 blamed on the host, or a challenge),
-- timed fleet-wide with the total rate it met: a throttle that saw none holds where the
-- one that did holds. ARGV: host key, idle ttl, the rate (req/s; '' when not known),
-- '1' when that rate was a host rate in force. Returns the time.
local now = clock()
redis.call('HSET', ARGV[1], 'last_signal', tostring(now))
if ARGV[3] ~= '' then
  redis.call('HSET', ARGV[1], 'signal_rate', ARGV[3], 'signal_found', ARGV[4])
else
  redis.call('HDEL', ARGV[1], 'signal_rate', 'signal_found')
end
keep(ARGV[1], tonumber(ARGV[2]))
return tostring(now)
