-- Extends a lease; worker and epoch must match; capped at usable_until.
-- P = { id, w, e, lease (ms) }
local prev = replay()
if prev then return prev end
local a, rec, err = matching(P.id, P.w, P.e)
if err then return fail(err) end
a.l = math.min(NOW + P.lease, rec.uu)
put_owner(a)
return finish({ a = a })
