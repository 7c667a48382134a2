-- A lease stalled: its host slot goes back, its endpoint stays held. A ``stl:<token>``
-- marker keeps a renewal already on its way from adding the lease back to the host.
-- A released lease is left alone. ARGV: prefix, host, token, ttl. Returns 1 if the slot went back.
local p, host, token = ARGV[1], ARGV[2], ARGV[3]
if redis.call('EXISTS', p .. 'rel:' .. token) == 1 then return 0 end
redis.call('SET', p .. 'stl:' .. token, '1', 'PX', math.ceil(tonumber(ARGV[4]) * 2000))
return redis.call('ZREM', p .. 'hl:' .. host, token)
