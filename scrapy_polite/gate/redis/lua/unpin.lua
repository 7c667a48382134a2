-- Unpin a session from an endpoint this process found unusable (unless another
-- process has pinned it elsewhere meanwhile). ARGV: prefix, session, endpoint id.
local p, session, id = ARGV[1], ARGV[2], ARGV[3]
if redis.call('GET', p .. 'pin:' .. session) == id then redis.call('DEL', p .. 'pin:' .. session) end
redis.call('ZREM', p .. 'pc:' .. id, session)
return 1
