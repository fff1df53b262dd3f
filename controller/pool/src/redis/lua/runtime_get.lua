-- Read only: the worker's readable report, else nothing (fail closed). P = { w }
local rep = readable_report(P.w)
if not rep then return cjson.encode({ r = {} }) end
return '{"r":{"x":' .. istr(rep.x) .. ',"b":' .. rep.body .. '}}'
