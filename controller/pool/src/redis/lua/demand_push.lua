-- Extraction demand a replica that does not lead relays to the leader: appended to a
-- bounded list (the oldest dropped beyond `max`) that lives `ttl` ms after the last
-- push. P = { d = demand (JSON text), max, ttl }
local n = redis.call('RPUSH', K_DEMANDS, P.d)
if n > P.max then redis.call('LTRIM', K_DEMANDS, n - P.max, -1) end
redis.call('PEXPIRE', K_DEMANDS, P.ttl)
return cjson.encode({ r = { ok = true } })
