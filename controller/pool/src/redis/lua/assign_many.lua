-- Leases AVAILABLE, unowned, usable proxies to workers in one step (a single `assign`
-- is a batch of one): each request is judged alone, in input order, each under its own
-- new epoch.
-- P = { q = [{ id, w, l (lease ms) }] }
local prev = replay()
if prev then return prev end

-- Check phase: the index keys of every proxy a request may move (AVAILABLE ones), and
-- of the records the opportunistic purge deletes; nothing else.
local due = due_expired(PURGE_N)
for _, q in ipairs(P.q) do
  local rec = get_rec(q.id)
  if rec and rec.st == 'AVAILABLE' then need_keys(rec) end
end
local need = need_reply()
if need then return need end
purge_due(due)

-- Never reused, never backwards (even if a failover lost the last write).
local epoch = NOW * 1000
local stored = redis.call('GET', K_EPOCH)
if stored and tonumber(stored) + 1 > epoch then epoch = tonumber(stored) + 1 end
local last = nil

local res = {}
for i, q in ipairs(P.q) do
  local rec = get_rec(q.id)
  if not live(rec) then
    res[i] = { err = 'not_found' }
  elseif rec.st ~= 'AVAILABLE' or owned(q.id) or rec.uu <= NOW or held_until(rec.up) then
    res[i] = { err = 'not_assignable' }
  else
    last = istr(epoch)
    epoch = epoch + 1
    unindex(rec)
    local a = { p = q.id, u = rec.up, w = q.w, e = last, l = math.min(NOW + q.l, rec.uu), d = false }
    put_owner(a)
    index(rec)
    res[i] = { a = a }
  end
end
if last then redis.call('SET', K_EPOCH, last); touch(K_EPOCH) end
return finish({ res = res })
