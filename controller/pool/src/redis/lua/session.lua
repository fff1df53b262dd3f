-- Worker-session helpers (composed after the prelude into the session scripts).
-- A session is stored as { w, i, s, av? (decimal string), ae? (decimal string),
-- f = fence open, x = expiry ms }.

local function get_session(w)
  local raw = redis.call('HGET', K_SESSIONS, w)
  if not raw then return nil end
  local ok, s = pcall(cjson.decode, raw)
  if not ok or type(s) ~= 'table' or type(s.x) ~= 'number' then return nil end
  return s
end

local function live_session(w)
  local s = get_session(w)
  if s and s.x > NOW then return s end
  return nil
end

local function put_session(s)
  redis.call('HSET', K_SESSIONS, s.w, cjson.encode(s)); touch(K_SESSIONS, 'sess')
  redis.call('ZADD', K_SESSION_EXP, s.x, s.w); touch(K_SESSION_EXP, 'sess')
end

-- A stored report: "<session>|<sequence>|<digest>|<body JSON>".
local function split_report(raw)
  if not raw then return nil end
  local s, q, d, body = string.match(raw, '^([^|]*)|([^|]*)|([^|]*)|(.*)$')
  if not s then return nil end
  return { s = s, q = q, d = d, body = body }
end

-- The worker's report if readable: unexpired, written under its live session.
local function readable_report(w)
  local sess = live_session(w)
  if not sess then return nil end
  local rep = split_report(redis.call('HGET', K_RUNTIME, w))
  if not rep or rep.s ~= sess.s then return nil end
  local x = redis.call('ZSCORE', K_RUNTIME_EXP, w)
  if not x or tonumber(x) <= NOW then return nil end
  rep.x = tonumber(x)
  return rep
end
