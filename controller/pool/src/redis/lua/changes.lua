-- Read only: the change feed after cursor P.c (decimal; '' = none). P = { c, lim }
local n = redis.call('LLEN', K_FEED)
local first, last = nil, nil
if n > 0 then
  first = feed_seq_of(redis.call('LINDEX', K_FEED, 0))
  last = feed_seq_of(redis.call('LINDEX', K_FEED, -1))
end
local function page(ids, nxt, lost, more)
  return '{"r":{"ids":[' .. table.concat(ids, ',') .. '],"next":"' .. istr(nxt) ..
    '","lost":' .. tostring(lost) .. ',"more":' .. tostring(more) .. '}}'
end
local head = last or 0
if P.c == '' then return page({}, head, true, false) end
local c = tonumber(P.c)
if n == 0 then return page({}, head, c ~= 0, false) end
if c == 0 then
  -- A cursor of an empty feed: it goes on from the marker that began the list.
  local e0 = redis.call('LINDEX', K_FEED, 0)
  if string.sub(e0, -1) ~= '|' then return page({}, head, true, false) end
  c = first
end
-- Past the newest change (a reset store) or before the oldest kept: lost.
if c > last or c + 1 < first then return page({}, head, true, false) end
local start = c - first + 1
if start >= n then return page({}, c, false, false) end
local stop = math.min(start + P.lim, n) - 1
local entries = redis.call('LRANGE', K_FEED, start, stop)
local ids = {}
for i, e in ipairs(entries) do
  ids[i] = '"' .. string.sub(e, string.find(e, '|', 1, true) + 1) .. '"'
end
local nxt = c + #entries
return page(ids, nxt, false, nxt < last)
