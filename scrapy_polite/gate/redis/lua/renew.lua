-- Keep this process's leases and heartbeat alive; re-assert leases Redis lost
-- (a restarted server), since their requests are still in flight. The
-- heartbeat lasts three TTLs: sweeping a live process orphans its URLs for
-- good, while a lapsed lease is simply re-asserted.
-- ARGV: prefix, ttl, process id, last heard from Redis, longest spacing, then
-- (token, endpoint id, host (empty once stalled), session) x n.
-- Returns {now, leases that had lapsed, 1 if the heartbeat had lapsed}.
local p, ttl, proc = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now = clock()
grace_until(p, now, ttl, tonumber(ARGV[4]), tonumber(ARGV[5]))
local expires = now + ttl
local beat = tonumber(redis.call('ZSCORE', p .. 'procs', proc))
redis.call('ZADD', p .. 'procs', now + 3 * ttl, proc)
keep(p .. 'procs', ttl * 6)
keep(p .. 'held:' .. proc, ttl * 6)
local lapsed = 0
for i = 6, #ARGV, 4 do
  local token, id, host, session = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  -- Released since this renewal was put together: leave it released.
  if redis.call('EXISTS', p .. 'rel:' .. token) == 0 then
    local score = tonumber(redis.call('ZSCORE', p .. 'el:' .. id, token))
    if not score or score <= now then lapsed = lapsed + 1 end
    redis.call('ZADD', p .. 'el:' .. id, expires, token)
    keep(p .. 'el:' .. id, ttl * 2)
    if host ~= '' and redis.call('EXISTS', p .. 'stl:' .. token) == 0 then
      redis.call('ZADD', p .. 'hl:' .. host, expires, token)
      keep(p .. 'hl:' .. host, ttl * 2)
    end
    if session ~= '' then
      local holder = redis.call('GET', p .. 'sl:' .. session)
      if holder == token or not holder then
        redis.call('SET', p .. 'sl:' .. session, token, 'PX', math.ceil(ttl * 1000))
      end
    end
  end
end
return {tostring(now), lapsed, (beat and beat > now) and 0 or 1}
