-- One atomic extraction (docs/pool.md "Extract").
-- K_RESULT = replay key: idem:<d> with an idempotency key, else this call's own
-- operation key (op:<digest of its nonce>), which only a retry of the same call reads.
-- K_RESULT2 is the same key.
-- P = { cnt, res, aon, dig, n (this call's nonce, hex), ittl, minttl, maxage?, budget,
--       src? = KEYS positions of every combination matching the filters, in the
--       request's walk order (absent: no filter, the source is `available`),
--       cv = the registry version `src` is complete for }
-- KEYS: without a filter every known index key; with one, the matching combinations and
-- every known owned:<d> key.
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

-- Sources: `available`, or every combination matching the filters (the caller proves
-- it knew them all: registry version). MATCH: their names, for the filter re-check.
local sources, MATCH = {}, nil
if P.src then
  if not combos_known() then return combos_reply() end
  MATCH = {}
  for i, pos in ipairs(P.src) do
    sources[i] = KEYS[pos]
    MATCH[KEYS[pos]] = true
  end
else
  sources[1] = K_AVAILABLE
end

-- Held-back upstreams (a new pool generation, docs/pool.md "Pool generations"): their
-- proxies are not eligible. When every upstream with un-extracted proxies is held back,
-- nothing can be eligible and nothing is read.
local HELD, any_held = {}, false
do
  local g = redis.call('HGETALL', K_GEN)
  for i = 1, #g, 2 do
    local f = g[i]
    if string.sub(f, 1, 2) == 'h:' and tonumber(g[i + 1]) > NOW then
      HELD[string.sub(f, 3)] = true
      any_held = true
    end
  end
end
if any_held then
  local all_held = true
  local inv = redis.call('HGETALL', K_INVENTORY)
  for i = 1, #inv, 2 do
    if tonumber(inv[i + 1]) > 0 and not HELD[inv[i]] then all_held = false; break end
  end
  if all_held then sources = {} end
end

-- The scan reads only the fields it checks from the stored JSON (no full decode): keys
-- are unique in a record and string values are escaped, so `"name":` occurs once.
-- (Plain `string.find` then an anchored match: a pattern search over the whole record
-- costs more than decoding it.)
local function num(raw, name)
  local at = string.find(raw, name, 1, true)
  return at and tonumber(string.match(raw, '^[%d%.eE%+%-]+', at + #name))
end
local function str(raw, name)
  local at = string.find(raw, name, 1, true)
  return at and string.match(raw, '^[^"]*', at + #name)
end

-- Eligible: live, AVAILABLE, unowned, usable, not held back, not under a health check's
-- mark (`ck` in the future), minimum remaining TTL, health freshness, and (filtered) its
-- combination is one of the matching ones. Returns ok, exp, combo, uu.
-- The fixed head `encode_rec` writes, matched in one call (C calls dominate the cost
-- of a Lua script): without a mark (the common case, one match as before), else with
-- one (a second match); a record without `lc` (never checked, so never AVAILABLE) or
-- any other shape falls back to the field-by-field reads.
local HEAD = '^{"st":"AVAILABLE","exp":(%d+),"uu":(%d+),"lc":(%d+),"up":"([^"]*)","ix":{"a":"([^"]*)"'
local HEAD_CK = '^{"st":"AVAILABLE","exp":(%d+),"uu":(%d+),"lc":(%d+),"ck":(%d+),"up":"([^"]*)","ix":{"a":"([^"]*)"'
local function eligible(raw, is_owned)
  if is_owned or not raw then return false end
  local exp_s, uu_s, lc_s, up_h, combo_h = string.match(raw, HEAD)
  if not exp_s then
    local ck_s
    exp_s, uu_s, lc_s, ck_s, up_h, combo_h = string.match(raw, HEAD_CK)
    if ck_s and tonumber(ck_s) > NOW then return false end
  end
  if exp_s then
    local exp, uu = tonumber(exp_s), tonumber(uu_s)
    if exp <= NOW or uu <= NOW or exp - NOW < P.minttl then return false end
    if any_held and HELD[up_h] then return false end
    if P.maxage and NOW - tonumber(lc_s) > P.maxage then return false end
    if MATCH and not MATCH[combo_h] then return false end
    return true, exp, combo_h, uu
  end
  if not string.find(raw, '"st":"AVAILABLE"', 1, true) then return false end
  local ck = num(raw, '"ck":')
  if ck and ck > NOW then return false end
  local exp, uu = num(raw, '"exp":'), num(raw, '"uu":')
  if not exp or not uu or exp <= NOW or uu <= NOW then return false end
  if exp - NOW < P.minttl then return false end
  if any_held and HELD[str(raw, '"up":"') or ''] then return false end
  if P.maxage then
    local lc = num(raw, '"lc":')
    if not lc or NOW - lc > P.maxage then return false end
  end
  local combo = str(raw, '"a":"')
  if not combo then return false end
  if MATCH and not MATCH[combo] then return false end
  return true, exp, combo, uu
end

-- The walk: the sources one after the other, in the order given (`src` comes in the
-- request's combination order, see `order_combinations`), each by descending score
-- (usable_until > now), then descending member. Combination members are
-- `<15-digit usable_until>|<id>`; `available` members are IDs.
local lower = '(' .. istr(NOW)
local si, off, ms, mi, exhausted = 1, 0, {}, 1, false
local function next_member(page)
  while si <= #sources do
    if mi > #ms and not exhausted then
      ms = redis.call('ZREVRANGEBYSCORE', sources[si], '+inf', lower, 'LIMIT', off, page)
      off, mi = off + #ms, 1
      if #ms < page then exhausted = true end
    end
    if mi <= #ms then
      local m = ms[mi]
      mi = mi + 1
      if MATCH then return cmember_id(m) end
      return m
    end
    si, off, ms, mi, exhausted = si + 1, 0, {}, 1, false
  end
  return nil
end
-- Up to `n` next members (fewer at the end of the sources), read in pages of `n`.
local function next_members(n)
  local ids = {}
  for _ = 1, n do
    local id = next_member(n)
    if not id then break end
    ids[#ids + 1] = id
  end
  return ids
end
-- Members an asking unfiltered call reads past its own to name their combinations too
-- (each key a call is given costs Redis about half a microsecond: the adapter passes
-- them to every unfiltered call, so a few dozen).
local LOOKAHEAD = 32
-- Bounded scan: every member read costs one unit of the budget.
local want = P.cnt + P.res
local found, raws, exps, combos, uus = {}, {}, {}, {}, {}
local examined, complete = 0, true
while #found < want do
  local take = math.min(want - #found, P.budget - examined)
  if take <= 0 then
    if next_member(1) then complete = false end
    break
  end
  local batch = next_members(take)
  if #batch == 0 then break end
  -- One read per batch for records and owners.
  local rs = redis.call('HMGET', K_RECORDS, unpack(batch))
  local owners_raw = redis.call('HMGET', K_OWNERS, unpack(batch))
  for i, id in ipairs(batch) do
    examined = examined + 1
    local ok, exp, combo, uu = eligible(rs[i], owners_raw[i] ~= false)
    if ok then
      local k = #found + 1
      found[k], raws[k], exps[k], combos[k], uus[k] = id, rs[i], exp, combo, uu
    end
  end
  if #batch < take then break end
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

-- Check phase (the combination key of every proxy to extract must be given), then writes.
-- A filtered extraction purges nothing on the side (its keys cannot name every expired
-- record's); the next write or the maintenance loop does.
local due = MATCH and {} or due_expired(PURGE_N)
if not refusal then
  for i = 1, n do
    local c = combos[i]
    if not GIVEN[c] and not MISSING_SEEN[c] then
      MISSING_SEEN[c] = true
      MISSING[#MISSING + 1] = c
    end
  end
end
-- An unfiltered call that has to ask for a combination also names those of the
-- eligible records after its own (the next LOOKAHEAD members, within the scan budget),
-- given or not: the adapter gives the keys the last asking extraction named to the next
-- ones, so callers taking the head of `available` one after the other find its
-- combinations given instead of each asking (docs/pool.md "Key space").
if #MISSING > 0 and not MATCH then
  for i = 1, n do
    local c = combos[i]
    if not MISSING_SEEN[c] then MISSING_SEEN[c] = true; MISSING[#MISSING + 1] = c end
  end
  local take = math.min(LOOKAHEAD, P.budget - examined)
  local ahead = next_members(take)
  if #ahead > 0 then
    local rs = redis.call('HMGET', K_RECORDS, unpack(ahead))
    local owners_raw = redis.call('HMGET', K_OWNERS, unpack(ahead))
    for i = 1, #ahead do
      local ok, _, c = eligible(rs[i], owners_raw[i] ~= false)
      if ok and not MISSING_SEEN[c] then
        MISSING_SEEN[c] = true
        MISSING[#MISSING + 1] = c
      end
    end
  end
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
-- Out of `available` and its combination (one ZREM per key for all chosen proxies).
if n > 0 then
  redis.call('ZREM', K_AVAILABLE, unpack(found, 1, n))
  local by_combo = {}
  for i = 1, n do
    local members = by_combo[combos[i]]
    if not members then
      members = {}
      by_combo[combos[i]] = members
    end
    members[#members + 1] = cmember(uus[i], found[i])
  end
  for key, members in pairs(by_combo) do combo_rem(key, members) end
end
local writes = {}
for i = 1, n do
  local raw = raws[i]
  count(str(raw, '"up":"'), 'AVAILABLE', -1)
  local at = string.find(raw, STATE_FROM, 1, true)
  raw = string.sub(raw, 1, at - 1) .. STATE_TO .. string.sub(raw, at + #STATE_FROM)
  writes[#writes + 1] = found[i]
  writes[#writes + 1] = raw
  raws[i] = raw
  if not earliest or exps[i] < earliest then earliest = exps[i] end
end
if n > 0 then redis.call('HSET', K_RECORDS, unpack(writes)) end
for i = 1, n do changed(found[i]) end
commit()
if n == 0 then
  return cjson.encode({ r = { x = { d = P.dig, at = NOW, empty = true } } })
end
-- IDs and digests are validated identifiers / hex: safe inside JSON strings as they are.
local ids = {}
for i = 1, n do ids[i] = '"' .. found[i] .. '"' end
local head = '{"d":"' .. P.dig .. '","n":"' .. P.n .. '","at":' .. istr(NOW)
local until_ms = math.min(NOW + P.ittl, earliest)
local result = head .. ',"ids":[' .. table.concat(ids, ',') .. ']}'
store_result(K_RESULT, until_ms, result)
if K_RESULT2 ~= K_RESULT then store_result(K_RESULT2, until_ms, result) end
-- The reply carries the records as stored (the reader takes the connection fields).
return '{"r":{"x":' .. head .. ',"px":[' .. table.concat(raws, ',', 1, n) .. ']}}}'
