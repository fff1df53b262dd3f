-- Read only: up to `lim` AVAILABLE, unowned, usable proxies of one upstream, freshest
-- first. P = { u = KEYS position of upstream:<u>, lim }
local ids = redis.call('ZREVRANGEBYSCORE', KEYS[P.u], '+inf', '(' .. istr(NOW), 'LIMIT', 0, P.lim)
if #ids == 0 then return '{"r":[]}' end
return cjson.encode({ r = ids })
