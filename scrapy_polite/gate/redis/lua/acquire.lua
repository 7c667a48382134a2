-- Grant a lease, or say why not and when to look again.
-- ARGV: the values named in ``ACQUIRE_ARGS`` (scrapy_polite/gate/redis/scripts.py), which
-- the loader binds to ``A`` by name, then the candidate endpoint ids from ``FIRST_CANDIDATE``.
-- A grant keeps the host's record (``h:<host>``) for the host record TTL.
-- A session's pin (``pin:<session>``) and its endpoint's share
-- (``pc:<endpoint>``, session -> last use) expire after the idle TTL; a pin
-- that is not among a complete candidate list (a later crawl with another
-- pool) is treated like a dead one.
-- Returns {code, endpoint id, time, host state, health, signal}, named in ``AcquireReply``:
-- the host state is {now, limit, lo, hi, min_delay, interval, paused_until, fleet in-flight,
-- grants, interval version, gap, slack}; gap (seconds since the endpoint's previous request to
-- the host) and slack (how long its spacing had let it go before this request) are -1 when none
-- is remembered, and only sent on a grant. Health lists (id, failures, unhealthy_until) of every
-- endpoint the script looked at, for the process's health mirror; signal is the host's last
-- rate signal from any process: {time, rate, found} ('' = none or not known).
local p, host, session, token = A.prefix, A.host, A.session, A.token
local ttl, epc = tonumber(A.ttl), tonumber(A.endpoint_concurrency)
local maxf, backoff_max = tonumber(A.max_failures), tonumber(A.backoff_max)
local u, poll, repin = tonumber(A.u), tonumber(A.poll), A.repin == '1'
local hint, complete, pin_ttl = A.hint, A.complete == '1', tonumber(A.pin_ttl)
local now = clock()
local grace = grace_until(p, now, ttl, tonumber(A.last_seen), tonumber(A.longest_spacing))
local hk = p .. 'h:' .. host
local hv = redis.call('HMGET', hk, 'limit', 'lo', 'hi', 'min_delay', 'interval', 'next_start', 'paused_until',
                     'grants', 'interval_v')
local limit = tonumber(hv[1]) or tonumber(A.limit)
local lo = tonumber(hv[2]) or tonumber(A.lo)
local hi = tonumber(hv[3]) or tonumber(A.hi)
local min_delay = tonumber(hv[4]) or 0
local interval = tonumber(hv[5]) or 0
local next_start = tonumber(hv[6]) or 0
local paused = tonumber(hv[7]) or 0
local hl = p .. 'hl:' .. host
redis.call('ZREMRANGEBYSCORE', hl, '-inf', now)
local inflight = redis.call('ZCARD', hl)
local state = {tostring(now), tostring(limit), tostring(lo), tostring(hi), tostring(min_delay),
               tostring(interval), tostring(paused), tostring(inflight), tostring(tonumber(hv[8]) or 0),
               tostring(tonumber(hv[9]) or 0)}
-- Health of every endpoint looked at, so each process's mirror follows the shared counts.
local seen, seen_at = {}, {}
local function reply(code, id, at)
  local sig = redis.call('HMGET', hk, 'last_signal', 'signal_rate', 'signal_found')
  return {code, id or '', tostring(at or now), state, seen, {sig[1] or '', sig[2] or '', sig[3] or ''}}
end
if grace > now then return reply('grace', '', grace) end
if paused > now then return reply('paused', '', paused) end
if inflight >= limit then return reply('host_full', '', now + poll) end
if next_start > now then return reply('host_spacing', '', next_start) end

local function health(id)
  local ev = redis.call('HMGET', p .. 'e:' .. id, 'failures', 'unhealthy_until')
  local failures, unhealthy = tonumber(ev[1]) or 0, tonumber(ev[2]) or 0
  if not seen_at[id] then
    local n = #seen
    seen[n + 1], seen[n + 2], seen[n + 3] = id, tostring(failures), tostring(unhealthy)
    seen_at[id] = n + 3
  end
  return failures, unhealthy
end
local function pair(id)
  local pv = redis.call('HMGET', p .. 'p:' .. id .. ':' .. host, 'next_allowed', 'cooldown_until', 'banned_until',
                        'granted')
  -- A spacing drawn before the band was raised still waits the new minimum.
  local shortest = (tonumber(pv[4]) or -math.huge) + math.max(lo, min_delay)
  return math.max(tonumber(pv[1]) or 0, shortest), tonumber(pv[2]) or 0, tonumber(pv[3]) or 0
end

local cands, offered = {}, {}
for i = FIRST_CANDIDATE, #ARGV do
  cands[#cands + 1] = ARGV[i]
  offered[ARGV[i]] = true
end
local function sessions_on(id)
  -- Sessions pinned to *id*, used within the pin idle TTL.
  local pc = p .. 'pc:' .. id
  redis.call('ZREMRANGEBYSCORE', pc, '-inf', now - pin_ttl)
  return pc
end
if session ~= '' then
  if redis.call('EXISTS', p .. 'sl:' .. session) == 1 then return reply('session_busy', '', now + poll) end
  local pk = p .. 'pin:' .. session
  -- A pin that expired or was lost with a restarted Redis: this process's own pin holds.
  local pin = redis.call('GET', pk) or (hint ~= '' and hint) or false
  if pin then
    local failures = health(pin)
    if failures >= maxf or (complete and not offered[pin]) then
      if not repin then return reply('session_lost', pin, now) end
      redis.call('DEL', pk)
      redis.call('ZREM', p .. 'pc:' .. pin, session)
      pin = false
    end
  end
  if not pin then
    -- Least-shared usable endpoint, not banned for this host; readiness is checked below.
    local best, best_rank, best_unhealthy = nil, nil, nil
    for _, id in ipairs(cands) do
      local failures, unhealthy = health(id)
      local _, _, banned = pair(id)
      if failures < maxf and banned <= now then
        local rank = redis.call('ZCARD', sessions_on(id))
        if best == nil or rank < best_rank or (rank == best_rank and unhealthy < best_unhealthy) then
          best, best_rank, best_unhealthy = id, rank, unhealthy
        end
      end
    end
    if best == nil then return reply('no_endpoint', '', now + 1) end
    pin = best
  end
  -- (Re)pin, and keep the pin alive for another idle TTL.
  redis.call('SET', pk, pin, 'PX', math.ceil(pin_ttl * 1000))
  redis.call('ZADD', sessions_on(pin), now, session)
  keep(p .. 'pc:' .. pin, pin_ttl)
  cands = {pin}
end

local wake = now + 60
local chosen = nil
for _, id in ipairs(cands) do
  local el = p .. 'el:' .. id
  redis.call('ZREMRANGEBYSCORE', el, '-inf', now)
  local failures, unhealthy = health(id)
  if redis.call('ZCARD', el) >= epc then
    wake = math.min(wake, now + poll)
  else
    local next_allowed, cooldown, banned = pair(id)
    local ready = math.max(unhealthy, next_allowed, cooldown, banned)
    if ready <= now then
      chosen = id
      if failures >= maxf then
        -- A dead endpoint gets one probe per longest backoff: its result decides.
        local until_ = now + backoff_max
        redis.call('HSET', p .. 'e:' .. id, 'unhealthy_until', tostring(until_))
        seen[seen_at[id]] = tostring(until_)
      end
      break
    end
    wake = math.min(wake, ready)
  end
end
if chosen == nil then
  if session ~= '' then return reply('session_wait', cands[1], wake) end
  return reply('endpoint_wait', '', wake)
end

local expires = now + ttl
redis.call('ZADD', p .. 'el:' .. chosen, expires, token)
keep(p .. 'el:' .. chosen, ttl * 2)
redis.call('ZADD', hl, expires, token)
keep(hl, ttl * 2)
if session ~= '' then
  redis.call('SET', p .. 'sl:' .. session, token, 'PX', math.ceil(ttl * 1000))
end
if interval > 0 then redis.call('HSET', hk, 'next_start', tostring(now + interval)) end
local spacing = math.max(lo + u * (hi - lo), min_delay)
local pk = p .. 'p:' .. chosen .. ':' .. host
local prev = redis.call('HMGET', pk, 'granted', 'next_allowed')
local last = tonumber(prev[1])
redis.call('HSET', pk, 'next_allowed', tostring(now + spacing), 'granted', tostring(now))
keep(pk, spacing + tonumber(A.pair_memory))
state[9] = tostring(redis.call('HINCRBY', hk, 'grants', 1))
keep(hk, tonumber(A.host_ttl))
state[11] = last and tostring(now - last) or '-1'
state[12] = last and tostring(math.max(0, now - math.max(tonumber(prev[2]) or 0, last + math.max(lo, min_delay))))
  or '-1'
return reply('granted', chosen, now)
