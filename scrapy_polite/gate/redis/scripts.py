"""Lua scripts of the Redis gate: each decision that must be atomic is one script.

All times are Redis server time (``TIME``), so processes on different
machines agree on spacing and cooldowns whatever their clocks say. Lua
numbers come back to redis-py as integers, so every time is returned as a
string. Keys are built inside the scripts from the namespace prefix in
``ARGV[1]`` (see :class:`scrapy_polite.gate.redis.state.Keys`), which a single
Redis server (not a cluster) allows.
"""

from __future__ import annotations

_PRELUDE = """
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local function keep(key, seconds)
  -- Extend a key's lifetime to at least *seconds*; keys without expiry get one.
  local want = math.ceil(seconds * 1000)
  local pt = redis.call('PTTL', key)
  if pt < want then redis.call('PEXPIRE', key, want) end
end
local function grace_until(p, now, ttl, last_seen, spacing)
  -- The fleet's pulse (``alive``: last touch, start of its record) says whether leases may be in
  -- flight that Redis does not know of: after nobody reached it for a TTL, or after it lost its
  -- data since this process last saw it, no new lease is granted for a TTL and the longest
  -- spacing, so their owners re-assert them first. A fresh namespace waits for nothing.
  local ak = p .. 'alive'
  local av = redis.call('HMGET', ak, 'at', 'since', 'grace')
  local at, since, grace = tonumber(av[1]), tonumber(av[2]), tonumber(av[3]) or 0
  local anchor = nil
  if at and now - at > ttl then anchor = now
  elseif not at and last_seen > 0 then anchor = now
  elseif since and last_seen > 0 and since > last_seen then anchor = since end
  since = since or now
  if anchor then grace = math.max(grace, anchor + ttl + spacing) end
  redis.call('HSET', ak, 'at', tostring(now), 'since', tostring(since), 'grace', tostring(grace))
  redis.call('EXPIRE', ak, 86400)
  return grace
end
"""

#: Grant a lease, or say why not and when to look again.
#: ARGV: prefix, host, session ('' = none), token, ttl, endpoint_concurrency,
#: default limit, default delay low, default delay high, max_failures,
#: backoff max, u (uniform 0..1 for the jitter), poll, repin ('1'/'0'),
#: this process's pin of the session ('' = none), '1' if the candidates are
#: every usable endpoint of the process, pin idle TTL, Redis time this process
#: last heard from Redis (0: never), longest spacing, host record TTL, candidate endpoint ids...
#: A grant keeps the host's record (``h:<host>``) for the host record TTL.
#: A session's pin (``pin:<session>``) and its endpoint's share
#: (``pc:<endpoint>``, session -> last use) expire after the idle TTL; a pin
#: that is not among a complete candidate list (a later crawl with another
#: pool) is treated like a dead one.
#: The reply's fifth element lists (id, failures, unhealthy_until) of every
#: endpoint the script looked at, for the process's health mirror; the sixth is
#: the host's last rate signal from any process ('' = none).
#: Returns {code, endpoint id, time, {now, limit, lo, hi, min_delay, interval,
#: paused_until, fleet in-flight, grants, gap, slack}}; gap (seconds since the
#: endpoint's previous request to the host) and slack (how long its spacing had
#: let it go before this request), -1 when none is remembered, only when granted.
ACQUIRE = _PRELUDE + """
local p, host, session, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ttl, epc = tonumber(ARGV[5]), tonumber(ARGV[6])
local maxf, backoff_max = tonumber(ARGV[10]), tonumber(ARGV[11])
local u, poll, repin = tonumber(ARGV[12]), tonumber(ARGV[13]), ARGV[14] == '1'
local hint, complete, pin_ttl = ARGV[15], ARGV[16] == '1', tonumber(ARGV[17])
local now = clock()
local grace = grace_until(p, now, ttl, tonumber(ARGV[18]), tonumber(ARGV[19]))
local hk = p .. 'h:' .. host
local hv = redis.call('HMGET', hk, 'limit', 'lo', 'hi', 'min_delay', 'interval', 'next_start', 'paused_until',
                     'grants')
local limit = tonumber(hv[1]) or tonumber(ARGV[7])
local lo = tonumber(hv[2]) or tonumber(ARGV[8])
local hi = tonumber(hv[3]) or tonumber(ARGV[9])
local min_delay = tonumber(hv[4]) or 0
local interval = tonumber(hv[5]) or 0
local next_start = tonumber(hv[6]) or 0
local paused = tonumber(hv[7]) or 0
local hl = p .. 'hl:' .. host
redis.call('ZREMRANGEBYSCORE', hl, '-inf', now)
local inflight = redis.call('ZCARD', hl)
local state = {tostring(now), tostring(limit), tostring(lo), tostring(hi), tostring(min_delay),
               tostring(interval), tostring(paused), tostring(inflight), tostring(tonumber(hv[8]) or 0)}
-- Health of every endpoint looked at, so each process's mirror follows the shared counts.
local seen, seen_at = {}, {}
local function reply(code, id, at)
  return {code, id or '', tostring(at or now), state, seen, redis.call('HGET', hk, 'last_signal') or ''}
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
for i = 21, #ARGV do
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
keep(pk, spacing + 1)
state[9] = tostring(redis.call('HINCRBY', hk, 'grants', 1))
keep(hk, tonumber(ARGV[20]))
state[10] = last and tostring(now - last) or '-1'
state[11] = last and tostring(math.max(0, now - math.max(tonumber(prev[2]) or 0, last + math.max(lo, min_delay))))
  or '-1'
return reply('granted', chosen, now)
"""

#: ARGV: prefix, host, session, token, endpoint id, held key, waiter token, ttl.
#: A ``rel:<token>`` marker outlives any renewal already on its way, so that
#: renewal cannot bring the lease (and its session lock) back.
RELEASE = """
local p, host, session, token, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
redis.call('SET', p .. 'rel:' .. token, '1', 'PX', math.ceil(tonumber(ARGV[8]) * 2000))
redis.call('ZREM', p .. 'el:' .. id, token)
redis.call('ZREM', p .. 'hl:' .. host, token)
if session ~= '' and redis.call('GET', p .. 'sl:' .. session) == token then
  redis.call('DEL', p .. 'sl:' .. session)
end
if ARGV[6] ~= '' then redis.call('HDEL', ARGV[6], ARGV[7]) end
return 1
"""

#: Keep this process's leases and heartbeat alive; re-assert leases Redis lost
#: (a restarted server), since their requests are still in flight. The
#: heartbeat lasts three TTLs: sweeping a live process orphans its URLs for
#: good, while a lapsed lease is simply re-asserted.
#: ARGV: prefix, ttl, process id, last heard from Redis, longest spacing, then
#: (token, endpoint id, host (empty once stalled), session) x n.
#: Returns {now, leases that had lapsed, 1 if the heartbeat had lapsed}.
RENEW = _PRELUDE + """
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
"""

#: A lease stalled: its host slot goes back, its endpoint stays held. A ``stl:<token>``
#: marker keeps a renewal already on its way from adding the lease back to the host.
#: A released lease is left alone. ARGV: prefix, host, token, ttl. Returns 1 if the slot went back.
STALL = """
local p, host, token = ARGV[1], ARGV[2], ARGV[3]
if redis.call('EXISTS', p .. 'rel:' .. token) == 1 then return 0 end
redis.call('SET', p .. 'stl:' .. token, '1', 'PX', math.ceil(tonumber(ARGV[4]) * 2000))
return redis.call('ZREM', p .. 'hl:' .. host, token)
"""

#: A process leaves cleanly: nothing it held is orphaned, and the last one to
#: leave clears the fleet's pulse, so the next crawl starts without a grace.
#: ARGV: prefix, process id.
LEAVE = """
local p, proc = ARGV[1], ARGV[2]
redis.call('DEL', p .. 'held:' .. proc)
redis.call('ZREM', p .. 'procs', proc)
if redis.call('ZCARD', p .. 'procs') == 0 then redis.call('DEL', p .. 'alive') end
return 1
"""

#: A rate signal from a host (a cooldown after its 429), timed fleet-wide: a
#: throttle that saw none must not step the host's limit back up within its
#: recovery window. ARGV: host key, idle ttl. Returns the time.
SIGNAL = _PRELUDE + """
local now = clock()
redis.call('HSET', ARGV[1], 'last_signal', tostring(now))
keep(ARGV[1], tonumber(ARGV[2]))
return tostring(now)
"""

#: Unpin a session from an endpoint this process found unusable (unless another
#: process has pinned it elsewhere meanwhile). ARGV: prefix, session, endpoint id.
UNPIN = """
local p, session, id = ARGV[1], ARGV[2], ARGV[3]
if redis.call('GET', p .. 'pin:' .. session) == id then redis.call('DEL', p .. 'pin:' .. session) end
redis.call('ZREM', p .. 'pc:' .. id, session)
return 1
"""

#: Processes whose heartbeat ran out: move the requests they held to the
#: orphans list, once (the script is atomic, so one survivor does it).
#: The list keeps its newest entries only, for an idle TTL after the last one.
#: ARGV: prefix, entries kept, idle ttl.
#: Returns {proc, count, proc, count, ...}.
SWEEP = _PRELUDE + """
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
"""

#: Push a timer field out to at least now + seconds (pauses, cooldowns, bans).
#: ARGV: key, field, seconds. Returns the field's new value.
EXTEND = _PRELUDE + """
local key, field, seconds = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = clock()
local old = tonumber(redis.call('HGET', key, field)) or 0
local until_ = math.max(old, now + seconds)
redis.call('HSET', key, field, tostring(until_))
keep(key, until_ - now + 1)
return tostring(until_)
"""

#: A host's minimum interval between request starts; the next start moves by
#: the difference, so a raised rate applies at once. ARGV: key, seconds, ttl.
SET_INTERVAL = _PRELUDE + """
local key, seconds = ARGV[1], tonumber(ARGV[2])
local old = tonumber(redis.call('HGET', key, 'interval')) or 0
local next_start = tonumber(redis.call('HGET', key, 'next_start')) or 0
redis.call('HSET', key, 'interval', tostring(seconds), 'next_start', tostring(next_start + seconds - old))
keep(key, tonumber(ARGV[3]))
return 1
"""

#: A connection failure through an endpoint: exponential backoff, shared.
#: ARGV: key, backoff base, backoff cap, ttl. Returns {failures, unhealthy_until}.
ENDPOINT_FAILED = _PRELUDE + """
local key, base, cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = clock()
local failures = redis.call('HINCRBY', key, 'failures', 1)
local until_ = now + math.min(cap, base * 2 ^ (failures - 1))
redis.call('HSET', key, 'unhealthy_until', tostring(until_))
keep(key, tonumber(ARGV[4]))
return {failures, tostring(until_)}
"""

#: ARGV: key. A success clears the failure count, if there was one.
ENDPOINT_OK = """
if (tonumber(redis.call('HGET', ARGV[1], 'failures')) or 0) > 0 then
  redis.call('HSET', ARGV[1], 'failures', 0, 'unhealthy_until', 0)
end
return 1
"""
