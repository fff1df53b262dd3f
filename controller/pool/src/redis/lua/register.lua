-- A new session replaces (and fences) the worker's earlier one; its report dies with it.
-- P = { w, i, s, ttl }
local prev = replay()
if prev then return prev end
local s = { w = P.w, i = P.i, s = P.s, f = true, x = NOW + P.ttl }
put_session(s)
redis.call('HDEL', K_RUNTIME, P.w)
redis.call('ZREM', K_RUNTIME_EXP, P.w)
return finish({ s = s })
