-- Shared prelude of every activity-pool script (composed at compile time in scripts.rs).
--
-- KEYS layout (fixed, set by keys.rs):
--  1 records  2 unique  3 idkeys  4 expiry  5 available  6 owners  7 owner-expiry
--  8 epoch  9 inventory  10 managed  11 worker-sessions  12 worker-session-expiry
--  13 worker-runtime  14 worker-runtime-expiry  15 combos (SET: the non-empty
--  combination keys)  16 combos-version  17 leader-fence (the newest fencing token)
--  18 leader-lease ("<holder>|<token>", PX)  19 demands (LIST: extraction demand
--  relayed to the leader)  20 generation (HASH: `start` = when the pool generation
--  began, ms; `h:<upstream>` = the end of that upstream's hold-back)  21 changes (LIST:
--  the change feed, see `changed`)  22 result key  23 second result key
--  24.. index keys (avail:<combination> and owned:<digest> keys), given by the Rust side.
-- ARGV: 1 now override in ms ('' = read TIME)  2 operation TTL ms  3 opportunistic
--  purge count  4 operation payload (JSON)  5 the caller's fencing token ('' = an
--  unfenced call)  6 an extra argument of some scripts.
-- A script never builds a key name: names come from KEYS (or from a record's `ix`,
-- whose names were given in KEYS when it was written, and are checked against KEYS
-- again before use). A script that meets a key it was not given returns
-- {"need":[...]} before it writes anything; the adapter retries with those keys.

local K_RECORDS, K_UNIQUE, K_IDKEYS, K_EXPIRY, K_AVAILABLE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local K_OWNERS, K_OWNER_EXP, K_EPOCH, K_INVENTORY, K_MANAGED = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local K_SESSIONS, K_SESSION_EXP, K_RUNTIME, K_RUNTIME_EXP = KEYS[11], KEYS[12], KEYS[13], KEYS[14]
local K_COMBOS, K_COMBOS_VER = KEYS[15], KEYS[16]
local K_FENCE, K_LEADER, K_DEMANDS, K_GEN = KEYS[17], KEYS[18], KEYS[19], KEYS[20]
local K_FEED = KEYS[21]
local K_RESULT, K_RESULT2 = KEYS[22], KEYS[23]

local OVERRIDE = ARGV[1] ~= ''
local NOW
if OVERRIDE then
  NOW = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local OP_TTL = tonumber(ARGV[2])
local PURGE_N = tonumber(ARGV[3])
local P = cjson.decode(ARGV[4])

-- Fencing: a leader-only write carries the token its leadership was granted; when the
-- newest token is another one (a newer leader exists, or the key was lost with the
-- data), the script refuses before reading or writing anything else.
local FENCE = ARGV[5] or ''
if FENCE ~= '' and redis.call('GET', K_FENCE) ~= FENCE then
  return cjson.encode({ r = { err = 'fenced' } })
end

-- KEYS position of the first index key (after the fixed keys and the result keys).
local FIRST_INDEX = 24
local GIVEN = {}
for i = FIRST_INDEX, #KEYS do GIVEN[KEYS[i]] = true end
local MISSING, MISSING_SEEN = {}, {}
-- Keys written by this script, by TTL class ('main', 'sess', 'rt').
local TOUCHED = {}

local function istr(n) return string.format('%.0f', n) end

-- Unsigned decimal strings (u64 values that doubles cannot hold exactly).
local function ucmp(a, b)
  if #a ~= #b then return (#a < #b) and -1 or 1 end
  if a == b then return 0 end
  return (a < b) and -1 or 1
end

local function touch(key, class) TOUCHED[key] = class or 'main' end

-- The change feed (`ProxyCatalog::changes`): K_FEED lists '<seq>|<id>', one entry per
-- record write (insert, change, purge), sequences contiguous, the oldest dropped past
-- FEED_CAP (options.rs CHANGE_FEED_CAPACITY). A list that is gone (never written,
-- lost with the data, or expired) starts again with a marker '<NOW * 1000>|' (no ID),
-- far past any cursor of an old list, so such a cursor reads as lost, never as a
-- continuation; cursor 0 (read from an empty feed) follows on from the marker while
-- the marker is kept.
local FEED_CAP = 262144
local FEED_SEQ = nil
local function feed_seq_of(entry)
  return tonumber(string.sub(entry, 1, string.find(entry, '|', 1, true) - 1))
end
local function changed(id)
  if not FEED_SEQ then
    local last = redis.call('LINDEX', K_FEED, -1)
    if last then
      FEED_SEQ = feed_seq_of(last)
    else
      FEED_SEQ = NOW * 1000
      redis.call('RPUSH', K_FEED, istr(FEED_SEQ) .. '|')
    end
  end
  FEED_SEQ = FEED_SEQ + 1
  if redis.call('RPUSH', K_FEED, istr(FEED_SEQ) .. '|' .. id) > FEED_CAP then
    redis.call('LPOP', K_FEED)
  end
  touch(K_FEED)
end

local function need_keys(rec)
  if not rec then return true end
  local ok = true
  for _, k in pairs(rec.ix) do
    if not GIVEN[k] then
      ok = false
      if not MISSING_SEEN[k] then MISSING_SEEN[k] = true; MISSING[#MISSING + 1] = k end
    end
  end
  return ok
end

local function need_reply()
  if #MISSING > 0 then return cjson.encode({ need = MISSING }) end
  return nil
end

-- The JSON value stored under `field` of hash `key`, decoded; nil when absent.
local function hget_json(key, field)
  local raw = redis.call('HGET', key, field)
  if not raw then return nil end
  return cjson.decode(raw)
end

local function get_rec(id) return hget_json(K_RECORDS, id) end

-- A record's JSON with the fields the extraction scan reads first, in a fixed order
-- (`{"st":…,"exp":…,"uu":…[,"lc":…][,"ck":…],"up":…,"ix":{"a":…,"o":…},…`): the scan
-- finds them with a plain `string.find` a few bytes in instead of decoding the record.
-- States, upstream IDs and key names are validated identifiers: no JSON escaping
-- needed. `ck`: the end of a health check's mark (`check_begin.lua`), only while one
-- was set and not ended.
local HOT = { st = true, exp = true, uu = true, lc = true, ck = true, up = true, ix = true }
local function encode_rec(rec)
  local rest = {}
  for k, v in pairs(rec) do
    if not HOT[k] then rest[k] = v end
  end
  local head = '{"st":"' .. rec.st .. '","exp":' .. istr(rec.exp) .. ',"uu":' .. istr(rec.uu)
  if rec.lc then head = head .. ',"lc":' .. istr(rec.lc) end
  if rec.ck then head = head .. ',"ck":' .. istr(rec.ck) end
  head = head .. ',"up":"' .. rec.up .. '","ix":{"a":"' .. rec.ix.a .. '","o":"' .. rec.ix.o .. '"}'
  local tail = cjson.encode(rest)
  if tail == '{}' then return head .. '}' end
  return head .. ',' .. string.sub(tail, 2)
end

-- Writes a record. Only inserts and expiry changes `touch` the key: a state change
-- never needs a later key expiry.
local function put_rec(rec)
  redis.call('HSET', K_RECORDS, rec.id, encode_rec(rec))
  changed(rec.id)
end

local function live(rec) return (rec and rec.exp > NOW) == true end

local UNEXTRACTED = { FETCHED = true, CHECKING = true, AVAILABLE = true, SUSPECT = true, UNHEALTHY = true, DRAINING = true }
local MANAGED = { FETCHED = true, CHECKING = true, AVAILABLE = true, SUSPECT = true, DRAINING = true }

-- Counter changes are summed per script and applied once at the end (`commit`).
local DELTA = {}

local function bump(key, field, d)
  local t = DELTA[key]
  if not t then t = {}; DELTA[key] = t end
  t[field] = (t[field] or 0) + d
end

-- A counter's value including this script's pending changes.
local function counter(key, field)
  local n = tonumber(redis.call('HGET', key, field) or '0')
  local t = DELTA[key]
  if t and t[field] then n = n + t[field] end
  return n
end

local function flush_counts()
  for key, t in pairs(DELTA) do
    for field, d in pairs(t) do
      if d ~= 0 then
        local n = redis.call('HINCRBY', key, field, d)
        if n == 0 then redis.call('HDEL', key, field) end
        if d > 0 then touch(key) end
      end
    end
  end
  DELTA = {}
end

local function count(up, st, d)
  if UNEXTRACTED[st] then bump(K_INVENTORY, up, d) end
  if MANAGED[st] then bump(K_MANAGED, up, d) end
end

local function owned(id) return redis.call('HEXISTS', K_OWNERS, id) == 1 end

-- Pool generations (docs/pool.md "Pool generations"): while `h:<upstream>` is in the
-- future, that upstream's proxies are neither extractable nor assignable.
local function held_until(up)
  local v = redis.call('HGET', K_GEN, 'h:' .. up)
  v = v and tonumber(v)
  if v and v > NOW then return v end
  return nil
end

-- Combination keys (`avail:<upstream>|<protocol>|<region>|<carrier>|<city>`, one per
-- label combination, rec.ix.a; a record written before the city names a four-part key): K_COMBOS holds every non-empty one, and empty ones until the
-- maintenance sweep (`combos_gc.lua`) drops them — so a combination that empties and
-- fills again does not change the registry. K_COMBOS_VER changes whenever one is added
-- or dropped, so a caller passing "every combination matching my filter" can prove it
-- knew them all (`combos_known`).
-- A combination member is `<usable_until, 15 digits>|<id>` (score: usable_until), so a
-- reader merging several combinations gets every member's score without WITHSCORES
-- (formatting scores costs more than the read). Same order as plain IDs: equal scores
-- sort by the ID after the common prefix.
local function cmember(uu, id) return string.format('%015.0f', uu) .. '|' .. id end
local function cmember_id(m) return string.sub(m, 17) end

-- A new registry version (never lower than the last, even after a lost write).
local function combos_bump()
  local v = tonumber(redis.call('GET', K_COMBOS_VER) or '0')
  redis.call('SET', K_COMBOS_VER, istr(math.max(v + 1, NOW * 1000)))
  touch(K_COMBOS_VER)
end

-- The registry and its version expire with the combinations (never before them).
local function combo_add(key, score, id)
  redis.call('ZADD', key, score, cmember(score, id))
  touch(key); touch(K_COMBOS); touch(K_COMBOS_VER)
  if redis.call('SADD', K_COMBOS, key) == 1 then combos_bump() end
end

local function combo_rem(key, members)
  redis.call('ZREM', key, unpack(members))
end


-- The reply of a call whose caller did not know every registered combination: all of
-- them, and the registry version they make complete. Nothing was written.
local function combos_reply()
  local all = redis.call('SMEMBERS', K_COMBOS)
  local v = redis.call('GET', K_COMBOS_VER) or '0'
  if #all == 0 then return '{"need":[],"cv":"' .. v .. '"}' end
  return cjson.encode({ need = all, cv = v })
end

-- False when the caller's registry version (P.cv) is not the current one.
local function combos_known()
  return (redis.call('GET', K_COMBOS_VER) or '0') == P.cv
end

-- Out of every index key, whatever the membership rule says (purge).
local function unindex_all(rec)
  redis.call('ZREM', K_AVAILABLE, rec.id)
  combo_rem(rec.ix.a, { cmember(rec.uu, rec.id) })
  redis.call('ZREM', rec.ix.o, rec.id)
end

-- Out of the indexes the membership rule put it in: AVAILABLE + owned -> owned:<u>;
-- AVAILABLE + unowned -> `available` and its combination; any other state -> none.
-- `is_owned` may be given when the caller already knows it.
local function unindex(rec, is_owned)
  if rec.st ~= 'AVAILABLE' then return end
  if is_owned == nil then is_owned = owned(rec.id) end
  if is_owned then
    redis.call('ZREM', rec.ix.o, rec.id)
  else
    redis.call('ZREM', K_AVAILABLE, rec.id)
    combo_rem(rec.ix.a, { cmember(rec.uu, rec.id) })
  end
end

-- Where the membership rule says the record belongs.
local function index(rec)
  if rec.st ~= 'AVAILABLE' or rec.uu <= NOW then return end
  if owned(rec.id) then
    redis.call('ZADD', rec.ix.o, rec.uu, rec.id); touch(rec.ix.o)
  else
    redis.call('ZADD', K_AVAILABLE, rec.uu, rec.id); touch(K_AVAILABLE)
    combo_add(rec.ix.a, rec.uu, rec.id)
  end
end

-- Writes `after` over `before` (same id): indexes, counters, expiry.
local function update(before, after)
  unindex(before)
  count(before.up, before.st, -1)
  count(after.up, after.st, 1)
  if before.exp ~= after.exp then
    redis.call('ZADD', K_EXPIRY, after.exp, after.id); touch(K_EXPIRY); touch(K_RECORDS)
  end
  put_rec(after)
  index(after)
end

local function copy(t)
  local c = {}
  for k, v in pairs(t) do
    if type(v) == 'table' then c[k] = copy(v) else c[k] = v end
  end
  return c
end

local function get_owner(id) return hget_json(K_OWNERS, id) end

local function put_owner(a)
  redis.call('HSET', K_OWNERS, a.p, cjson.encode(a)); touch(K_OWNERS)
  redis.call('ZADD', K_OWNER_EXP, a.l, a.p); touch(K_OWNER_EXP)
end

local function del_owner(id)
  redis.call('HDEL', K_OWNERS, id)
  redis.call('ZREM', K_OWNER_EXP, id)
end

-- IDs purged by this script (cached reads of them are stale).
local PURGED = {}

-- Deletes a record and everything that points at it.
local function purge(rec)
  local id = rec.id
  PURGED[id] = true
  redis.call('HDEL', K_RECORDS, id)
  changed(id)
  if redis.call('HGET', K_UNIQUE, rec.uq) == id then redis.call('HDEL', K_UNIQUE, rec.uq) end
  redis.call('HDEL', K_IDKEYS, id)
  redis.call('ZREM', K_EXPIRY, id)
  unindex_all(rec)
  del_owner(id)
  count(rec.up, rec.st, -1)
end

-- Check phase of a purge: of the first n records past hard expiry, those `keep`
-- accepts (all without `keep`), their keys checked.
local function due_expired(n, keep)
  local out = {}
  if n <= 0 then return out end
  local ids = redis.call('ZRANGEBYSCORE', K_EXPIRY, '-inf', NOW, 'LIMIT', 0, n)
  for _, id in ipairs(ids) do
    local rec = get_rec(id)
    if not (rec and keep and not keep(rec)) then
      if rec then need_keys(rec) end
      out[#out + 1] = { id = id, rec = rec }
    end
  end
  return out
end

-- Write phase of a purge.
local function purge_due(due)
  for _, d in ipairs(due) do
    if d.rec then
      purge(d.rec)
    else
      redis.call('ZREM', K_EXPIRY, d.id)
      redis.call('HDEL', K_IDKEYS, d.id)
    end
  end
  return #due
end

-- A stored operation result answering at NOW ("<expiry ms>|<reply>"), or nil.
local function stored_result(key)
  local raw = redis.call('GET', key)
  if not raw then return nil end
  local bar = string.find(raw, '|', 1, true)
  if not bar then return nil end
  if tonumber(string.sub(raw, 1, bar - 1)) <= NOW then return nil end
  return string.sub(raw, bar + 1)
end

local function store_result(key, expires, reply)
  local ttl = expires - NOW
  if ttl < 1 then return end
  redis.call('SET', key, istr(expires) .. '|' .. reply, 'PX', ttl)
end

local function latest(zkey)
  local top = redis.call('ZRANGE', zkey, -1, -1, 'WITHSCORES')
  if top[2] then return tonumber(top[2]) end
  return nil
end

-- Pushes every written key's expiry to the latest expiry of its class, so that a pool
-- that stops being written frees itself.
local function expire_touched()
  if next(TOUCHED) == nil then return end
  local at = {}
  local sources = { main = K_EXPIRY, sess = K_SESSION_EXP, rt = K_RUNTIME_EXP }
  for key, class in pairs(TOUCHED) do
    if not at[class] then
      at[class] = math.max(latest(sources[class]) or 0, NOW + 1000)
    end
    if OVERRIDE then
      redis.call('PEXPIRE', key, at[class] - NOW)
    else
      redis.call('PEXPIREAT', key, at[class])
    end
  end
end

-- Applies the pending counter changes and the key expiries.
local function commit()
  flush_counts()
  expire_touched()
end

-- Ends a write script: counters, key expiries, the operation result (for a retry),
-- the reply.
local function finish(result)
  commit()
  local reply = cjson.encode({ r = result })
  store_result(K_RESULT, NOW + OP_TTL, reply)
  return reply
end

local function fail(code)
  return finish({ err = code })
end

-- Start of a write script: the stored result of the same operation, if any.
local function replay()
  return stored_result(K_RESULT)
end
