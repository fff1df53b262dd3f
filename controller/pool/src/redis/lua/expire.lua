-- Releases at most `lim` leases whose end is <= now. P = { lim }
local prev = replay()
if prev then return prev end
local ids = redis.call('ZRANGEBYSCORE', K_OWNER_EXP, '-inf', NOW, 'LIMIT', 0, P.lim)
local recs = {}
for i, id in ipairs(ids) do
  recs[i] = get_rec(id)
  need_keys(recs[i])
end
local need = need_reply()
if need then return need end
local released = {}
for i, id in ipairs(ids) do
  local a = get_owner(id)
  if a then
    release(id, recs[i])
    released[#released + 1] = a
  else
    redis.call('ZREM', K_OWNER_EXP, id)
  end
end
local more = redis.call('ZCOUNT', K_OWNER_EXP, '-inf', NOW) > 0
return finish({ rel = released, more = more })
