-- Marks proxies under a health check (docs/pool.md "Check marks"), one entry at a time.
-- P = { m = [{ id, c = check ID (decimal string), h = hold ms }] }
-- A record's mark: `ck` = when it ends (the extraction skips the record while ck > now),
-- `ct` = the check that may end it early (`check_end.lua`), `cf` = the end of an earlier
-- check's mark it superseded (that one can no longer be ended early).
local prev = replay()
if prev then return prev end

local out = {}
for i, m in ipairs(P.m) do
  local rec = get_rec(m.id)
  if not live(rec) then
    out[i] = 'N'
  elseif rec.st == 'EXTRACTED' or rec.st == 'REMOVED' then
    out[i] = 'R:' .. rec.st
  else
    local at = NOW + m.h
    if rec.ct == m.c then
      -- The same check again (another check of the same task): extended.
      rec.ck = math.max(rec.ck or 0, at)
    else
      local was = rec.ck
      if was and was > NOW then rec.cf = was else rec.cf = nil end
      rec.ct = m.c
      rec.ck = math.max(rec.cf or 0, at)
    end
    put_rec(rec)
    out[i] = 'M:' .. istr(rec.ck)
  end
end
return finish(out)
