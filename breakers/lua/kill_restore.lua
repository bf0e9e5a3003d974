-- kill_restore.lua: a worker turns the kill switch back on, as it last saw it, in a store
-- that lost its data (`breakers.memory`). Nothing else ever writes the switch but a person.
--
-- KEYS[1] kill switch hash   KEYS[2] the store's epoch hash
-- ARGV[1] clock (clock.lua; always the server's here, as in epoch.lua)
-- ARGV[2] the epoch id the worker found   ARGV[3] who   ARGV[4] why
-- ARGV[5] how long after the epoch's birth (ms) a restore may still land
-- Returns {outcome, who, why, since_ms}; outcome is
--   "restored"  the switch is on now, marked restored (a person's on or off clears that)
--   "on"        it already was (a person turned it on, or another worker restored it)
--   "off_by"    a person turned it off in this epoch: it stays off
--   "late"      the epoch is older than the window: every worker that was looking when the
--               store came back has had its turn; this one was cut off, its memory is stale
--   "epoch"     the store has another epoch now (it lost its data again)
-- An epoch made by an earlier release has no birth time: a restore is not timed there.

local now = now_ms()
local e = redis.call('HMGET', KEYS[2], 'id', 'off_by', 'born_ms')
if e[1] ~= ARGV[2] then return {'epoch', '', '', 0} end
if e[2] then return {'off_by', '', '', 0} end
local h = redis.call('HMGET', KEYS[1], 'who', 'why', 'since_ms')
if h[1] then return {'on', h[1], h[2] or '', tonumber(h[3]) or 0} end
if e[3] and now - tonumber(e[3]) > tonumber(ARGV[5]) then return {'late', '', '', 0} end
redis.call('HSET', KEYS[1], 'who', ARGV[3], 'why', ARGV[4], 'since_ms', now, 'restored', 1)
return {'restored', ARGV[3], ARGV[4], now}
