-- A connection failure through an endpoint: exponential backoff, shared.
-- ARGV: key, backoff base, backoff cap, ttl. Returns {failures, unhealthy_until}.
local key, base, cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = clock()
local failures = redis.call('HINCRBY', key, 'failures', 1)
local until_ = now + math.min(cap, base * 2 ^ (failures - 1))
redis.call('HSET', key, 'unhealthy_until', tostring(until_))
keep(key, tonumber(ARGV[4]))
return {failures, tostring(until_)}
