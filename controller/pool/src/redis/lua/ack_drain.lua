-- Releases a draining assignment once the worker reports no use.
-- P = { id, w, e, act, res }
local prev = replay()
if prev then return prev end
local rec0 = get_rec(P.id)
need_keys(rec0)
local need = need_reply()
if need then return need end
local a, rec, err = matching(P.id, P.w, P.e)
if err then return fail(err) end
if not a.d then return fail('not_draining') end
if P.act > 0 or P.res > 0 then return fail('busy') end
release(P.id, rec)
return finish({ ok = true })
