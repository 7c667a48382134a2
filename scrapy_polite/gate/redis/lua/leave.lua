-- A process leaves cleanly: nothing it held is orphaned, and the last one to
-- leave clears the fleet's pulse, so the next crawl starts without a grace.
-- ARGV: prefix, process id.
local p, proc = ARGV[1], ARGV[2]
redis.call('DEL', p .. 'held:' .. proc)
redis.call('ZREM', p .. 'procs', proc)
if redis.call('ZCARD', p .. 'procs') == 0 then redis.call('DEL', p .. 'alive') end
return 1
