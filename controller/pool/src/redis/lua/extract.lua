-- One atomic extraction (docs/pool.md "Extract").
-- K_RESULT = replay key (idem:<d> or the request-ID op key); K_RESULT2 = the request-ID
-- op key (same as K_RESULT without an idempotency key).
-- P = { cnt, res, aon, dig, n (this call's nonce, hex), ittl, minttl, maxage?, budget,
--       dims = { u = [pos], r = [pos], c = [pos], p = [pos] } (driver candidates, KEYS positions, values ascending),
--       f = { proto = [], region = [], carrier = [], up = [] } }
-- A stored result names the extracted records; they cannot change (EXTRACTED never
-- re-enters) and outlive it (its expiry is at most their earliest hard expiry), so a
-- replay reads them back instead of keeping a second copy of every credential.
local stored = stored_result(K_RESULT)
if stored then
  local s = cjson.decode(stored)
  if s.d ~= P.dig then return cjson.encode({ r = { err = 'idempotency_key_reused' } }) end
  local raws = redis.call('HMGET', K_RECORDS, unpack(s.ids))
  for i = 1, #s.ids do
    if not raws[i] then return cjson.encode({ r = { err = 'replay_incomplete' } }) end
  end
  return '{"r":{"replay":{"d":"' .. s.d .. '","n":"' .. s.n .. '","at":' .. istr(s.at)
    .. ',"px":[' .. table.concat(raws, ',') .. ']}}}'
end

local function set_of(list)
  if #list == 0 then return nil end
  local s = {}
  for _, v in ipairs(list) do s[v] = true end
  return s
end
local F_PROTO, F_REGION, F_CARRIER, F_UP = set_of(P.f.proto), set_of(P.f.region), set_of(P.f.carrier), set_of(P.f.up)

local function eligible(rec, is_owned)
  if is_owned or not live(rec) or rec.st ~= 'AVAILABLE' or rec.uu <= NOW then return false end
  if rec.exp - NOW < P.minttl then return false end
  if P.maxage and (not rec.lc or NOW - rec.lc > P.maxage) then return false end
  if F_PROTO and not F_PROTO[rec.proto] then return false end
  if F_UP and not F_UP[rec.up] then return false end
  if F_REGION and not (rec.region and F_REGION[rec.region]) then return false end
  if F_CARRIER and not (rec.carrier and F_CARRIER[rec.carrier]) then return false end
  return true
end

-- Driving index: the smallest filtered dimension; ties in the order u, r, c, p.
local scan_keys, best = nil, nil
for _, d in ipairs({ 'u', 'r', 'c', 'p' }) do
  local list = P.dims[d]
  if list and #list > 0 then
    local size = 0
    for _, pos in ipairs(list) do size = size + redis.call('ZCARD', KEYS[pos]) end
    if not best or size < best then
      best = size
      scan_keys = {}
      for _, pos in ipairs(list) do scan_keys[#scan_keys + 1] = KEYS[pos] end
    end
  end
end
if not scan_keys then scan_keys = { K_AVAILABLE } end

-- Bounded scan: every member read costs one unit of the budget.
local want = P.cnt + P.res
local found, raws, examined, complete = {}, {}, 0, true
local lower = '(' .. istr(NOW)
local ki = 1
while ki <= #scan_keys and #found < want do
  local key = scan_keys[ki]
  local offset, exhausted = 0, false
  while not exhausted and #found < want do
    local left = P.budget - examined
    if left <= 0 then
      if #redis.call('ZREVRANGEBYSCORE', key, '+inf', lower, 'LIMIT', offset, 1) > 0 then complete = false end
      for j = ki + 1, #scan_keys do
        if redis.call('ZCOUNT', scan_keys[j], lower, '+inf') > 0 then complete = false end
      end
      ki = #scan_keys
      break
    end
    local page = math.min(left, want - #found + 2)
    local ids = redis.call('ZREVRANGEBYSCORE', key, '+inf', lower, 'LIMIT', offset, page)
    local consumed = 0
    if #ids > 0 then
      -- One read per page for records and owners (fewer calls, same members).
      local page_raws = redis.call('HMGET', K_RECORDS, unpack(ids))
      local page_owners = redis.call('HMGET', K_OWNERS, unpack(ids))
      for i, id in ipairs(ids) do
        examined = examined + 1
        consumed = consumed + 1
        local raw = page_raws[i]
        local rec = raw and cjson.decode(raw) or nil
        if eligible(rec, page_owners[i] ~= false) then found[#found + 1] = rec; raws[#found] = raw end
        if #found == want or examined >= P.budget then break end
      end
    end
    offset = offset + consumed
    if consumed == #ids and #ids < page then exhausted = true end
  end
  ki = ki + 1
end

-- Decide.
local k = #found
local refusal = nil
local n = 0
if not complete and k < want then
  refusal = { err = 'scan_budget' }
else
  local beyond = math.max(k - P.res, 0)
  n = math.min(P.cnt, beyond)
  if P.aon and n < P.cnt then refusal = { insufficient = beyond } end
end

-- Check phase, then writes.
local due = due_expired(PURGE_N)
if not refusal then
  for i = 1, n do need_keys(found[i]) end
end
local need = need_reply()
if need then return need end
purge_due(due)
if refusal then
  commit()
  return cjson.encode({ r = refusal })
end

-- Commit. The stored JSON is patched in place (state and extraction time) rather than
-- re-encoded: `"st":"AVAILABLE"` occurs once in a record (string values are escaped).
local STATE_FROM = '"st":"AVAILABLE"'
local STATE_TO = '"st":"EXTRACTED","xa":' .. istr(NOW)
local earliest = nil
-- Out of every AVAILABLE index (one ZREM per index key for all chosen proxies).
local zrem = {}
for i = 1, n do
  local rec = found[i]
  for _, k in ipairs({ K_AVAILABLE, rec.ix.p, rec.ix.u, rec.ix.r or false, rec.ix.c or false }) do
    if k then
      local members = zrem[k]
      if not members then members = {}; zrem[k] = members end
      members[#members + 1] = rec.id
    end
  end
end
for k, members in pairs(zrem) do redis.call('ZREM', k, unpack(members)) end
local writes = {}
for i = 1, n do
  local rec = found[i]
  count(rec.up, 'AVAILABLE', -1)
  local raw = raws[i]
  local at = string.find(raw, STATE_FROM, 1, true)
  if at then
    raw = string.sub(raw, 1, at - 1) .. STATE_TO .. string.sub(raw, at + #STATE_FROM)
  else
    local after = copy(rec)
    after.st, after.xa = 'EXTRACTED', NOW
    raw = cjson.encode(after)
  end
  writes[#writes + 1] = rec.id
  writes[#writes + 1] = raw
  raws[i] = raw
  if not earliest or rec.exp < earliest then earliest = rec.exp end
end
if n > 0 then redis.call('HSET', K_RECORDS, unpack(writes)) end
commit()
if n == 0 then
  return cjson.encode({ r = { x = { d = P.dig, at = NOW, empty = true } } })
end
-- IDs and digests are validated identifiers / hex: safe inside JSON strings as they are.
local ids = {}
for i = 1, n do ids[i] = '"' .. found[i].id .. '"' end
local head = '{"d":"' .. P.dig .. '","n":"' .. P.n .. '","at":' .. istr(NOW)
local until_ms = math.min(NOW + P.ittl, earliest)
local result = head .. ',"ids":[' .. table.concat(ids, ',') .. ']}'
store_result(K_RESULT, until_ms, result)
if K_RESULT2 ~= K_RESULT then store_result(K_RESULT2, until_ms, result) end
-- The reply carries the records as stored (the reader takes the connection fields).
return '{"r":{"x":' .. head .. ',"px":[' .. table.concat(raws, ',', 1, n) .. ']}}}'
