-- Processes whose heartbeat ran out: move the requests they held to the
-- orphans list, once (the script is atomic, so one survivor does it).
-- The list keeps its newest entries only, for an idle TTL after the last one.
-- ARGV: prefix, entries kept, idle ttl.
-- Returns {proc, count, proc, count, ...}.
local p, kept = ARGV[1], tonumber(ARGV[2])
local now = clock()
local dead = redis.call('ZRANGEBYSCORE', p .. 'procs', '-inf', now)
local out = {}
for _, proc in ipairs(dead) do
  local held = redis.call('HGETALL', p .. 'held:' .. proc)
  local n = 0
  for i = 1, #held, 2 do
    redis.call('RPUSH', p .. 'orphans', cjson.encode({proc = proc, url = held[i + 1], at = now}))
    n = n + 1
  end
  redis.call('DEL', p .. 'held:' .. proc)
  redis.call('ZREM', p .. 'procs', proc)
  out[#out + 1] = proc
  out[#out + 1] = n
end
if #out > 0 then
  redis.call('LTRIM', p .. 'orphans', -kept, -1)
  redis.call('EXPIRE', p .. 'orphans', math.ceil(tonumber(ARGV[3])))
end
return out
