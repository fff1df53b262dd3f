-- Ends health checks' marks (docs/pool.md "Check marks"): each only its own check's.
-- P = { e = [{ id, c = check ID (decimal string) }] }
local prev = replay()
if prev then return prev end

local out = {}
for i, e in ipairs(P.e) do
  local rec = get_rec(e.id)
  if live(rec) and rec.st ~= 'EXTRACTED' and rec.st ~= 'REMOVED' and rec.ct == e.c then
    local floor = rec.cf
    rec.ct, rec.cf = nil, nil
    if floor and floor > NOW then rec.ck = floor else rec.ck = nil end
    put_rec(rec)
    out[i] = true
  else
    out[i] = false
  end
end
return finish(out)
