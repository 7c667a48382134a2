-- Push a timer field out to at least now + seconds (pauses, cooldowns, bans).
-- ARGV: key, field, seconds. Returns the field's new value.
local key, field, seconds = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = clock()
local old = tonumber(redis.call('HGET', key, field)) or 0
local until_ = math.max(old, now + seconds)
redis.call('HSET', key, field, tostring(until_))
keep(key, until_ - now + 1)
return tostring(until_)
