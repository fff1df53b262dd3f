-- Leadership: extends the lease of `h` under token `t`; false when it is gone or
-- another holder / a newer token has it (the caller is no longer the leader).
-- P = { h = holder, t = token, ttl = lease ms }
local mine = P.h .. '|' .. P.t
if redis.call('GET', K_LEADER) ~= mine or redis.call('GET', K_FENCE) ~= P.t then
  return cjson.encode({ r = { ok = false } })
end
redis.call('SET', K_LEADER, mine, 'PX', P.ttl)
return cjson.encode({ r = { ok = true } })
