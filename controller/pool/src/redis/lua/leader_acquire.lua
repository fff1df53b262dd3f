-- Leadership: takes the leader lease when it is free, or keeps it when this holder
-- has it, and answers its fencing token. A new grant takes a new token (`new_token`,
-- leader.lua).
-- P = { h = holder, ttl = lease ms }
local cur = redis.call('GET', K_LEADER)
if cur then
  local bar = string.find(cur, '|', 1, true)
  if bar and string.sub(cur, 1, bar - 1) == P.h then
    local t = string.sub(cur, bar + 1)
    if redis.call('GET', K_FENCE) == t then
      redis.call('SET', K_LEADER, cur, 'PX', P.ttl)
      return cjson.encode({ r = { t = t } })
    end
  else
    return cjson.encode({ r = { held = true } })
  end
end
local t = new_token()
redis.call('SET', K_LEADER, P.h .. '|' .. t, 'PX', P.ttl)
return cjson.encode({ r = { t = t } })
