-- Extends leases in one step (a single `renew` is a batch of one): each claim is judged
-- alone (worker and epoch must match; capped at usable_until). Touches the owners hash
-- and its expiry index only: no index key.
-- P = { c = [{ id, w, e }], lease (ms) }
local prev = replay()
if prev then return prev end
local res = {}
for i, c in ipairs(P.c) do
  local a, rec, err = matching(c.id, c.w, c.e)
  if err then
    res[i] = { err = err }
  else
    a.l = math.min(NOW + P.lease, rec.uu)
    put_owner(a)
    res[i] = { a = a }
  end
end
return finish({ res = res })
