-- Marks live records of one upstream REMOVED (docs/pool.md "Remove").
-- P = { up, ids = [id] }
local prev = replay()
if prev then return prev end

local due = due_expired(PURGE_N)
for _, id in ipairs(P.ids) do need_keys(get_rec(id)) end
local need = need_reply()
if need then return need end

purge_due(due)
local out = {}
for i, id in ipairs(P.ids) do
  local rec = get_rec(id)
  if not live(rec) or rec.up ~= P.up then
    out[i] = 'not_found'
  elseif rec.st == 'EXTRACTED' or rec.st == 'REMOVED' then
    out[i] = 'ignored'
  else
    unindex(rec)
    del_owner(id)
    local after = copy(rec)
    after.st = 'REMOVED'
    update(rec, after)
    out[i] = 'removed'
  end
end
return finish(out)
