-- Read only: one page of the live assignments (HSCAN over the owners hash: every
-- assignment present for the whole walk is returned at least once).
-- P = { c = HSCAN cursor, lim = COUNT hint }
local page = redis.call('HSCAN', K_OWNERS, P.c, 'COUNT', P.lim)
local out = {}
local kv = page[2]
for i = 1, #kv, 2 do
  local a = cjson.decode(kv[i + 1])
  if a.l > NOW and live(get_rec(kv[i])) then out[#out + 1] = kv[i + 1] end
end
return '{"r":{"c":"' .. page[1] .. '","l":[' .. table.concat(out, ',') .. ']}}'
