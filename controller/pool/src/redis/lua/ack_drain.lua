-- Releases a draining assignment once the worker reports no use.
-- P = { id, w, e, act, res }
local reply, a, rec = draining_claim()
if reply then return reply end
if not a.d then return fail('not_draining') end
if P.act > 0 or P.res > 0 then return fail('busy') end
release(P.id, rec)
return finish({ ok = true })
