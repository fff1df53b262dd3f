-- Leadership granted by another lease store (a Kubernetes Lease): a new fencing token
-- for the leader that store just elected, by the rule of leader_acquire — never
-- reused, never backwards: max(server time in µs, newest token + 1). Every leader-only
-- write of an older token is refused from here on.
-- P = {}
local token = NOW * 1000
local stored = redis.call('GET', K_FENCE)
if stored and tonumber(stored) + 1 > token then token = tonumber(stored) + 1 end
local t = istr(token)
redis.call('SET', K_FENCE, t)
return cjson.encode({ r = { t = t } })
