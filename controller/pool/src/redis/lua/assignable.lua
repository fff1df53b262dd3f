-- Read only: up to `lim` AVAILABLE, unowned, usable proxies of one upstream, freshest
-- first (descending usable_until, then descending ID) across its combinations.
-- P = { up, src = KEYS positions of every combination of the upstream, cv, lim }
if not combos_known() then return combos_reply() end
-- Held back after a new pool generation: nothing is assignable yet.
if held_until(P.up) then return '{"r":[]}' end
local lower = '(' .. istr(NOW)
-- Members are `<15-digit score>|<id>`. Order: descending score; equal scores in source
-- order (combination names ascending), each source in its own order (descending ID).
local all = {}
for si, pos in ipairs(P.src) do
  local ms = redis.call('ZREVRANGEBYSCORE', KEYS[pos], '+inf', lower, 'LIMIT', 0, P.lim)
  for j, m in ipairs(ms) do
    all[#all + 1] = { s = tonumber(string.sub(m, 1, 15)), src = si, j = j, m = m }
  end
end
table.sort(all, function(a, b)
  if a.s ~= b.s then return a.s > b.s end
  if a.src ~= b.src then return a.src < b.src end
  return a.j < b.j
end)
local ids = {}
for i = 1, math.min(P.lim, #all) do ids[i] = cmember_id(all[i].m) end
if #ids == 0 then return '{"r":[]}' end
return cjson.encode({ r = ids })
