-- Read only: when the current pool generation began (docs/pool.md "Pool generations").
local g = redis.call('HGET', K_GEN, 'start')
if g then return cjson.encode({ r = { s = tonumber(g) } }) end
return '{"r":{}}'
