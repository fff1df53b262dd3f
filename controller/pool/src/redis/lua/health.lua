-- Applies health updates in order (docs/pool.md "Health").
-- P = { u = [{ id, st, ok = bool, lat?, fail? }] }
local prev = replay()
if prev then return prev end

local due = due_expired(PURGE_N)
for _, u in ipairs(P.u) do need_keys(get_rec(u.id)) end
local need = need_reply()
if need then return need end

purge_due(due)
local out = {}
for i, u in ipairs(P.u) do
  local rec = get_rec(u.id)
  if not live(rec) then
    out[i] = 'N'
  elseif rec.st == 'DRAINING' or rec.st == 'EXTRACTED' or rec.st == 'REMOVED' then
    out[i] = 'I:' .. rec.st
  else
    local after = copy(rec)
    after.st = u.st
    after.lc = NOW
    if u.ok then after.ls = NOW end
    if u.lat then after.lat = u.lat end
    after.fail = u.fail
    update(rec, after)
    out[i] = 'A:' .. u.st
  end
end
return finish(out)
