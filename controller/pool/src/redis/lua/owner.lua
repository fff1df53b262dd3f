-- Ownership helpers (composed after the prelude into the ownership scripts).
-- An assignment is stored as { p = proxy, u = upstream, w = worker, e = epoch (decimal
-- string), l = lease end ms, d = draining }.

-- The live assignment of `id` matching worker `w` and epoch `e` with an unexpired
-- lease; or nil and an error code.
local function matching(id, w, e)
  local rec = get_rec(id)
  if not live(rec) then return nil, nil, 'not_found' end
  local a = get_owner(id)
  if not a or a.w ~= w then return nil, nil, 'not_owner' end
  if a.e ~= e then return nil, nil, 'epoch_mismatch' end
  if a.l <= NOW then return nil, nil, 'lease_expired' end
  return a, rec, nil
end

-- The head of a script that changes the draining of the assignment P names
-- (P = { id, w, e, ... }): a replayed reply, a request for the record's index keys, or
-- a failure to return as is; otherwise nil, the matching assignment and its record.
local function draining_claim()
  local prev = replay()
  if prev then return prev end
  local rec0 = get_rec(P.id)
  need_keys(rec0)
  local need = need_reply()
  if need then return need end
  local a, rec, err = matching(P.id, P.w, P.e)
  if err then return fail(err) end
  return nil, a, rec
end

-- Deletes an assignment; DRAINING goes back to AVAILABLE; re-indexed.
local function release(id, rec)
  if rec then unindex(rec) end
  del_owner(id)
  if rec then
    local after = copy(rec)
    if after.st == 'DRAINING' then after.st = 'AVAILABLE' end
    update(rec, after)
  end
end
