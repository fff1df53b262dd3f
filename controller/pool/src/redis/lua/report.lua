-- Stores a complete sparse runtime report (docs/pool.md "Worker sessions and runtime").
-- P = { w, s, q, v, e, dig, ttl, chk = [{ p, e }] (entries with a non-zero count) }
-- ARGV[6] = the report body JSON, stored verbatim.
local prev = replay()
if prev then return prev end
local s = live_session(P.w)
if not s or s.s ~= P.s then return fail('stale_session') end
if not s.f then return fail('fence_closed') end
if s.av ~= P.v or s.ae ~= P.e then return fail('bound_mismatch') end
local old = split_report(redis.call('HGET', K_RUNTIME, P.w))
if old and old.s == P.s then
  local c = ucmp(P.q, old.q)
  if c < 0 then return fail('sequence_regression') end
  if c == 0 then
    if old.d == P.dig then return finish({ ack = 'replayed' }) end
    return fail('sequence_replay_mismatch')
  end
end
for _, c in ipairs(P.chk) do
  local rec = get_rec(c.p)
  local a = get_owner(c.p)
  if not live(rec) or ucmp(c.e, P.e) > 0 or not a or a.w ~= P.w or a.e ~= c.e then
    return fail('ownership_mismatch')
  end
end
redis.call('HSET', K_RUNTIME, P.w, P.s .. '|' .. P.q .. '|' .. P.dig .. '|' .. ARGV[6]); touch(K_RUNTIME, 'rt')
redis.call('ZADD', K_RUNTIME_EXP, NOW + P.ttl, P.w); touch(K_RUNTIME_EXP, 'rt')
return finish({ ack = 'accepted' })
