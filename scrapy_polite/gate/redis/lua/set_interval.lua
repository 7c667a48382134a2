-- A host's minimum interval between request starts; the next start moves by
-- the difference, so a raised rate applies at once. ARGV: key, seconds, ttl,
-- base (the interval this process last read: its change is a step from there).
-- Moved by another process since, a step from the older value is stale: a
-- faster one is dropped (that process's step stands) and a slower one (a cut)
-- never makes the host faster than it now is. Returns the interval in force.
local key, seconds, base = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
local old = tonumber(redis.call('HGET', key, 'interval')) or 0
if base and math.abs(old - base) > 1e-9 * math.max(old, base) then
  if seconds <= base then return tostring(old) end
  seconds = math.max(seconds, old)
end
local next_start = tonumber(redis.call('HGET', key, 'next_start')) or 0
redis.call('HSET', key, 'interval', tostring(seconds), 'next_start', tostring(next_start + seconds - old))
keep(key, tonumber(ARGV[3]))
return tostring(seconds)
