-- Leadership: gives the lease up (clean shutdown) when `h` still holds it under `t`,
-- so another replica takes over without waiting for the lease to run out.
-- P = { h = holder, t = token }
if redis.call('GET', K_LEADER) == P.h .. '|' .. P.t then
  redis.call('DEL', K_LEADER)
  return cjson.encode({ r = { ok = true } })
end
return cjson.encode({ r = { ok = false } })
