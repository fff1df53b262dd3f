-- Starts draining an assignment (idempotent).
-- P = { id, w, e }
local prev = replay()
if prev then return prev end
local rec0 = get_rec(P.id)
need_keys(rec0)
local need = need_reply()
if need then return need end
local a, rec, err = matching(P.id, P.w, P.e)
if err then return fail(err) end
if not a.d then
  a.d = true
  redis.call('HSET', K_OWNERS, a.p, cjson.encode(a)); touch(K_OWNERS)
  local after = copy(rec)
  after.st = 'DRAINING'
  update(rec, after)
end
return finish({ a = a })
