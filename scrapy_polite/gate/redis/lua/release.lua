-- ARGV: prefix, host, session, token, endpoint id, held key, waiter token, ttl.
-- A ``rel:<token>`` marker outlives any renewal already on its way, so that
-- renewal cannot bring the lease (and its session lock) back.
local p, host, session, token, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
redis.call('SET', p .. 'rel:' .. token, '1', 'PX', math.ceil(tonumber(ARGV[8]) * 2000))
redis.call('ZREM', p .. 'el:' .. id, token)
redis.call('ZREM', p .. 'hl:' .. host, token)
if session ~= '' and redis.call('GET', p .. 'sl:' .. session) == token then
  redis.call('DEL', p .. 'sl:' .. session)
end
if ARGV[6] ~= '' then redis.call('HDEL', ARGV[6], ARGV[7]) end
return 1
