-- Read only: counters and Available Slots of one upstream, scanning only its indexes.
-- P = { up, src = KEYS positions of every combination of the upstream, cv,
--       o = KEYS position of owned:<d>, budget }
if not combos_known() then return combos_reply() end
local ko = KEYS[P.o]
local inv = tonumber(redis.call('HGET', K_INVENTORY, P.up) or '0')
local man = tonumber(redis.call('HGET', K_MANAGED, P.up) or '0')
local members = redis.call('ZCARD', ko)
for _, pos in ipairs(P.src) do members = members + redis.call('ZCARD', KEYS[pos]) end
if members > P.budget then
  return cjson.encode({ r = { err = 'scan_budget' } })
end
local lower = '(' .. istr(NOW)
local slots = 0
-- Records of `ids`, read in batches (one HMGET per 256 members).
local function records_of(ids)
  local out = {}
  for first = 1, #ids, 256 do
    local last = math.min(first + 255, #ids)
    local raws = redis.call('HMGET', K_RECORDS, unpack(ids, first, last))
    for i = first, last do
      local raw = raws[i - first + 1]
      if raw then out[i] = cjson.decode(raw) end
    end
  end
  return out
end
local unowned = {}
-- Held back after a new pool generation: nothing unowned can be taken.
local held = held_until(P.up)
for _, pos in ipairs(held and {} or P.src) do
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[pos], lower, '+inf')) do unowned[#unowned + 1] = cmember_id(m) end
end
local recs = records_of(unowned)
local avail = 0
for i = 1, #unowned do
  local rec = recs[i]
  if live(rec) then
    slots = slots + rec.cap
    avail = avail + 1
  end
end
local runtimes = {}
local function usage_of(w)
  if runtimes[w] == nil then
    runtimes[w] = false
    local rep = readable_report(w)
    if rep then
      local ok, body = pcall(cjson.decode, rep.body)
      if ok and type(body) == 'table' and type(body.e) == 'string' and type(body.ent) == 'table' then
        local by = {}
        for _, e in ipairs(body.ent) do by[e.p] = e end
        runtimes[w] = { e = body.e, by = by }
      end
    end
  end
  return runtimes[w]
end
local owned_ids = redis.call('ZRANGEBYSCORE', ko, lower, '+inf')
local owned_recs = records_of(owned_ids)
for i, id in ipairs(owned_ids) do
  local rec = owned_recs[i]
  local a = get_owner(id)
  if live(rec) and a then
    local rt = usage_of(a.w)
    if rt and ucmp(rt.e, a.e) >= 0 then
      local used = 0
      local e = rt.by[id]
      if e and e.e == a.e then used = e.a + e.r end
      slots = slots + math.max(0, rec.cap - used)
    end
  end
end
return cjson.encode({ r = { inv = inv, man = man, avail = avail, slots = slots, held = held } })
