-- ARGV: key. A success clears the failure count, if there was one.
if (tonumber(redis.call('HGET', ARGV[1], 'failures')) or 0) > 0 then
  redis.call('HSET', ARGV[1], 'failures', 0, 'unhealthy_until', 0)
end
return 1
