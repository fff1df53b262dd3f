-- Upsert one chunk of a provider batch (docs/pool.md "Upsert").
-- P = { up, mg = safety margin ms, max = max_size, q = quarantine ms, z = [candidate] }, candidate =
-- { id, proto, host, port, zu? (username), zp? (password), region?, carrier?, city?, ttl, cap, uq,
--   ix = {p,u,r?,c?,o} (KEYS positions) }
local prev = replay()
if prev then return prev end

local up = P.up
-- Check phase: every record this chunk may touch must have its index keys given.
local due = due_expired(PURGE_N)
for _, c in ipairs(P.z) do
  local ix = {}
  for d, pos in pairs(c.ix) do ix[d] = KEYS[pos] end
  c.ix = ix
  -- Reads cached for the write phase (valid unless the record is purged meanwhile).
  c.rec0 = get_rec(c.id)
  need_keys(c.rec0)
  c.other0 = redis.call('HGET', K_UNIQUE, c.uq)
  if c.other0 and c.other0 ~= c.id then
    c.orec0 = get_rec(c.other0)
    need_keys(c.orec0)
  end
end
local need = need_reply()
if need then return need end

purge_due(due)
-- The pool generation: none means a new store (first install, or a Redis that lost its
-- data: every key goes with it). Records without one predate generations (an upgrade):
-- that pool lost nothing, so its generation counts as long begun.
local gen = redis.call('HGET', K_GEN, 'start')
local began = nil
if gen then
  gen = tonumber(gen)
else
  if redis.call('HLEN', K_RECORDS) > 0 then gen = 0 else gen = NOW; began = NOW end
  redis.call('HSET', K_GEN, 'start', istr(gen))
end
-- This upstream's hold-back ends at generation start + its quarantine. Only a hold
-- that lasts is stored: the extraction reads every stored one, so a pool past its
-- holds keeps just `start`.
local held = gen + P.q
if held > NOW then
  redis.call('HSET', K_GEN, 'h:' .. up, istr(held))
else
  redis.call('HDEL', K_GEN, 'h:' .. up)
  held = nil
end
local ins, ref, dropped = 0, 0, {}
local function drop(reason) dropped[reason] = (dropped[reason] or 0) + 1 end

for _, c in ipairs(P.z) do
  local skip = false
  local other = c.other0
  -- A purge (above, or for an earlier candidate) also dropped its unique mapping.
  if other and PURGED[other] then other = nil end
  if other and other ~= c.id then
    local orec = c.orec0
    if live(orec) then
      if orec.up ~= up then drop('incumbent_other_upstream') else drop('id_conflict') end
      skip = true
    elseif orec then
      purge(orec)
    else
      redis.call('HDEL', K_UNIQUE, c.uq)
    end
  end
  if not skip then
    local rec = c.rec0
    if PURGED[c.id] then rec = nil end
    if rec and not live(rec) then purge(rec); rec = nil end
    local exp = NOW + c.ttl
    local uu = exp - P.mg
    if rec then
      if rec.uq ~= c.uq then drop('id_conflict')
      elseif rec.up ~= up then drop('incumbent_other_upstream')
      elseif rec.st == 'EXTRACTED' then drop('already_extracted')
      elseif rec.st == 'REMOVED' then drop('already_removed')
      else
        local after = copy(rec)
        after.exp, after.uu = exp, uu
        after.user, after.pass = c.zu, c.zp
        after.region, after.carrier, after.city, after.cap = c.region, c.carrier, c.city, c.cap
        after.ix = c.ix
        update(rec, after)
        ref = ref + 1
      end
    else
      local inv = counter(K_INVENTORY, up)
      if inv >= P.max then
        drop('pool_full')
      else
        local new = {
          id = c.id, up = up, proto = c.proto, host = c.host, port = c.port,
          user = c.zu, pass = c.zp, region = c.region, carrier = c.carrier, city = c.city,
          st = 'FETCHED', fa = NOW, exp = exp, uu = uu, cap = c.cap, uq = c.uq, ix = c.ix,
        }
        put_rec(new); touch(K_RECORDS)
        redis.call('HSET', K_UNIQUE, c.uq, c.id); touch(K_UNIQUE)
        redis.call('HSET', K_IDKEYS, c.id, c.uq); touch(K_IDKEYS)
        redis.call('ZADD', K_EXPIRY, exp, c.id); touch(K_EXPIRY)
        count(up, 'FETCHED', 1)
        ins = ins + 1
      end
    end
  end
end

return finish({ ins = ins, ref = ref, drop = dropped, gen = began, held = held })
