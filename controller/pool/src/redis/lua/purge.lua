-- Maintenance: purges at most `lim` records past hard expiry, and as many expired
-- sessions and reports. P = { lim }
local prev = replay()
if prev then return prev end
local due = due_expired(P.lim)
local need = need_reply()
if need then return need end
local purged = purge_due(due)
local sessions = 0
for _, pair in ipairs({ { K_SESSION_EXP, K_SESSIONS }, { K_RUNTIME_EXP, K_RUNTIME } }) do
  local ids = redis.call('ZRANGEBYSCORE', pair[1], '-inf', NOW, 'LIMIT', 0, P.lim)
  for _, w in ipairs(ids) do
    redis.call('ZREM', pair[1], w)
    redis.call('HDEL', pair[2], w)
    sessions = sessions + 1
  end
end
local more = redis.call('ZCOUNT', K_EXPIRY, '-inf', NOW) > 0
  or redis.call('ZCOUNT', K_SESSION_EXP, '-inf', NOW) > 0
  or redis.call('ZCOUNT', K_RUNTIME_EXP, '-inf', NOW) > 0
return finish({ p = purged, s = sessions, more = more })
