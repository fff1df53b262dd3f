-- The leader takes up to `n` relayed demands, oldest first. P = { n }
local out = {}
for _ = 1, P.n do
  local d = redis.call('LPOP', K_DEMANDS)
  if not d then break end
  out[#out + 1] = d
end
return cjson.encode({ r = { d = out } })
