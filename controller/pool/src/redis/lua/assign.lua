-- Leases an AVAILABLE, unowned, usable proxy to a worker under a new epoch.
-- P = { id, w, lease (ms) }
local prev = replay()
if prev then return prev end

local due = due_expired(PURGE_N)
local rec0 = get_rec(P.id)
need_keys(rec0)
local need = need_reply()
if need then return need end
purge_due(due)

local rec = get_rec(P.id)
if not live(rec) then return fail('not_found') end
if rec.st ~= 'AVAILABLE' or owned(P.id) or rec.uu <= NOW or held_until(rec.up) then
  return fail('not_assignable')
end

-- Never reused, never backwards (even if a failover lost the last write).
local epoch = NOW * 1000
local stored = redis.call('GET', K_EPOCH)
if stored and tonumber(stored) + 1 > epoch then epoch = tonumber(stored) + 1 end
local e = istr(epoch)
redis.call('SET', K_EPOCH, e); touch(K_EPOCH)

unindex(rec)
local a = { p = P.id, u = rec.up, w = P.w, e = e, l = math.min(NOW + P.lease, rec.uu), d = false }
put_owner(a)
index(rec)
return finish({ a = a })
