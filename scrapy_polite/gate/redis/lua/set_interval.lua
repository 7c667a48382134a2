-- A host's minimum interval between request starts; the next start moves by
-- the difference, so a raised rate applies at once. ARGV: key, seconds, ttl.
local key, seconds = ARGV[1], tonumber(ARGV[2])
local old = tonumber(redis.call('HGET', key, 'interval')) or 0
local next_start = tonumber(redis.call('HGET', key, 'next_start')) or 0
redis.call('HSET', key, 'interval', tostring(seconds), 'next_start', tostring(next_start + seconds - old))
keep(key, tonumber(ARGV[3]))
return 1
