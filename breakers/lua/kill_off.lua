-- kill_off.lua: a person turns the kill switch off.
--
-- KEYS[1] kill switch hash   KEYS[2] the store's epoch hash
-- ARGV[1] clock (clock.lua; unused: nothing here is timed)   ARGV[2] who
-- Returns the state it had: {who, why, since_ms}, or an empty array if it was off.
-- The epoch remembers that a person turned it off since the store last lost its data,
-- so that no worker restores a switch it last saw on (`ResilientBreakers`).

redis.call('HSET', KEYS[2], 'off_by', ARGV[2])
local h = redis.call('HMGET', KEYS[1], 'who', 'why', 'since_ms')
if not h[1] then return {} end
redis.call('DEL', KEYS[1])
return {h[1], h[2] or '', tonumber(h[3]) or 0}
