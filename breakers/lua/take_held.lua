-- take_held.lua: hand the oldest held turns to exactly one replayer, deleting them.
--
-- KEYS[1] held-turns stream   ARGV[1] clock (clock.lua; unused)   ARGV[2] how many at most
-- Returns {id, {field, value, ...}, ...}: each entry is returned to one caller only,
-- because reading and XDEL happen in the same script.

local rows = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', tonumber(ARGV[2]))
local out = {}
for _, row in ipairs(rows) do
  redis.call('XDEL', KEYS[1], row[1])
  out[#out + 1] = row[1]
  out[#out + 1] = row[2]
end
return out
