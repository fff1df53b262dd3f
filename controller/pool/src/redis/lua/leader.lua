-- Leadership helpers (composed after the prelude into leader_acquire and leader_token).

-- A new fencing token, stored as the newest: never reused and never backwards, even
-- when a failover or a restart without persistence lost the last one:
-- max(server time in µs, newest token + 1). Every leader-only write of an older token
-- is refused from here on.
local function new_token()
  local token = NOW * 1000
  local stored = redis.call('GET', K_FENCE)
  if stored and tonumber(stored) + 1 > token then token = tonumber(stored) + 1 end
  local t = istr(token)
  redis.call('SET', K_FENCE, t)
  return t
end
