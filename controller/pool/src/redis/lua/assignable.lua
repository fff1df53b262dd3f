-- Read only: up to `lim` AVAILABLE, unowned, usable proxies of one upstream, freshest
-- first (descending usable_until, then descending ID) across its combinations.
-- P = { src = KEYS positions of every combination of the upstream, cv, lim }
if not combos_known() then return combos_reply() end
local lower = '(' .. istr(NOW)
local all = {}
for _, pos in ipairs(P.src) do
  local r = redis.call('ZREVRANGEBYSCORE', KEYS[pos], '+inf', lower, 'WITHSCORES', 'LIMIT', 0, P.lim)
  for j = 1, #r, 2 do all[#all + 1] = { id = r[j], s = tonumber(r[j + 1]) } end
end
table.sort(all, function(a, b)
  if a.s ~= b.s then return a.s > b.s end
  return a.id > b.id
end)
local ids = {}
for i = 1, math.min(P.lim, #all) do ids[i] = all[i].id end
if #ids == 0 then return '{"r":[]}' end
return cjson.encode({ r = ids })
