-- A host's minimum interval between request starts; the next start moves by
-- the difference, so a raised rate applies at once. ARGV: key, seconds, ttl,
-- base, version: the interval this process last read and the version it had
-- (``interval_v``, counted up by each change), its change being a step from there.
-- With the version moved since (another process changed the interval, even back
-- to the same value), the step is stale: a faster one is dropped (that process's
-- step stands) and a slower one (a cut) never makes the host faster than it now is.
-- Returns {applied (1/0), interval in force, version}.
local key, seconds, base, version = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5])
local hv = redis.call('HMGET', key, 'interval', 'next_start', 'interval_v')
local old, next_start, current = tonumber(hv[1]) or 0, tonumber(hv[2]) or 0, tonumber(hv[3]) or 0
if version ~= current and (seconds <= base or seconds <= old) then
  return {0, tostring(old), current}
end
redis.call('HSET', key, 'interval', tostring(seconds), 'next_start', tostring(next_start + seconds - old),
           'interval_v', current + 1)
keep(key, tonumber(ARGV[3]))
return {1, tostring(seconds), current + 1}
