-- Maintenance: of the combinations given (the index keys, KEYS FIRST_INDEX..), drops
-- from the registry those that hold nothing, and bumps the registry version when any
-- was dropped (every caller then re-learns the registry and forgets them).
-- Idempotent. P = {}
local dropped = {}
for i = FIRST_INDEX, #KEYS do
  local k = KEYS[i]
  if redis.call('ZCARD', k) == 0 and redis.call('SREM', K_COMBOS, k) == 1 then
    dropped[#dropped + 1] = k
  end
end
if #dropped > 0 then combos_bump() end
commit()
if #dropped == 0 then return '{"r":{"d":[]}}' end
return cjson.encode({ r = { d = dropped } })
