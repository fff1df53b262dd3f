-- Positive snapshot ACK: sets the bound, opens the fence, renews the session.
-- P = { w, s, v, e, ttl } (v, e decimal strings)
local prev = replay()
if prev then return prev end
local s = live_session(P.w)
if not s or s.s ~= P.s then return fail('stale_session') end
s.av, s.ae, s.f, s.x = P.v, P.e, true, NOW + P.ttl
put_session(s)
return finish({ s = s })
