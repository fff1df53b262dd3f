-- Read only: records and assignments by ID. P = { ids }
local parts = {}
for i, id in ipairs(P.ids) do
  local raw = redis.call('HGET', K_RECORDS, id)
  local own = redis.call('HGET', K_OWNERS, id)
  parts[i] = '[' .. (raw or 'null') .. ',' .. (own or 'null') .. ']'
end
return '{"r":{"now":' .. istr(NOW) .. ',"recs":[' .. table.concat(parts, ',') .. ']}}'
