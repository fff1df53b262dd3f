-- Negative snapshot ACK: closes the runtime write fence, renews the session.
-- P = { w, s, ttl }
local prev = replay()
if prev then return prev end
local s = live_session(P.w)
if not s or s.s ~= P.s then return fail('stale_session') end
s.f, s.x = false, NOW + P.ttl
put_session(s)
return finish({ s = s })
