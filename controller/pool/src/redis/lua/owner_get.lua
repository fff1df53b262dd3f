-- Read only: the assignment of a live proxy. P = { id }
local rec = get_rec(P.id)
if not live(rec) then return cjson.encode({ r = {} }) end
local raw = redis.call('HGET', K_OWNERS, P.id)
if not raw then return cjson.encode({ r = {} }) end
return '{"r":{"a":' .. raw .. '}}'
