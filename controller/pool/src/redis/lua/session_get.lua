-- Read only: the live session of a worker. P = { w }
local s = live_session(P.w)
if not s then return cjson.encode({ r = {} }) end
return cjson.encode({ r = { s = s } })
