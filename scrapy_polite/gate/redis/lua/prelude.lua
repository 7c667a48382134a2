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
