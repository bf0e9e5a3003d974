-- kill_off.lua: a person turns the kill switch off.
--
-- KEYS[1] kill switch hash   KEYS[2] the store's epoch hash
-- ARGV[1] clock (clock.lua; unused: nothing here is timed)   ARGV[2] who
-- ARGV[3] "1" to confirm an off made earlier (`KillSwitch.off`'s settle): nothing to do
--         while the epoch still notes an off; else the store lost its data since, and a
--         worker may have restored the switch from a look older than the off: note the
--         off in this epoch and turn off a restored switch (not one a person turned on).
-- Returns the state it had: {who, why, since_ms}, or an empty array if it was off
-- (or, confirming, if there was nothing to undo).
-- The epoch remembers that a person turned it off since the store last lost its data,
-- so that no worker restores a switch it last saw on (kill_restore.lua).

local confirming = ARGV[3] == '1'
if confirming and redis.call('HEXISTS', KEYS[2], 'off_by') == 1 then return {} end
local h = redis.call('HMGET', KEYS[1], 'who', 'why', 'since_ms', 'restored')
if confirming and h[1] and not h[4] then return {} end
redis.call('HSET', KEYS[2], 'off_by', ARGV[2])
if not h[1] then return {} end
redis.call('DEL', KEYS[1])
return {h[1], h[2] or '', tonumber(h[3]) or 0}
