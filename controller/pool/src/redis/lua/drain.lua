-- Starts draining an assignment (idempotent).
-- P = { id, w, e }
local reply, a, rec = draining_claim()
if reply then return reply end
if not a.d then
  a.d = true
  redis.call('HSET', K_OWNERS, a.p, cjson.encode(a)); touch(K_OWNERS)
  local after = copy(rec)
  after.st = 'DRAINING'
  update(rec, after)
end
return finish({ a = a })
