-- clear_gone.lua: an operator ends a pair's gone mark (the model is back, or the chain
-- was fixed): the fleet calls the model again at once.
--
-- KEYS[1] the pair's cooldown string   KEYS[2] cooldown index   KEYS[3] gone index
-- ARGV[1] clock (clock.lua)   ARGV[2] "<account>|<model>"   ARGV[3] the cooldown cap (ms)
-- Returns {kind, ms left}: "gone" (cleared), "cooldown" (a rate limit's cooldown: left in
-- place, it ends by itself) or "" (no mark, 0).
-- A gone mark is in the gone index; one an earlier release wrote is not, and is told by
-- its length: only a gone mark outlasts the cooldown cap.

local now = now_ms()
local member, cap = ARGV[2], tonumber(ARGV[3])
local ends = tonumber(redis.call('ZSCORE', KEYS[2], member)) or 0
if ends <= now then return {'', 0} end
local gone = tonumber(redis.call('ZSCORE', KEYS[3], member)) or 0
if gone <= now and ends - now <= cap then return {'cooldown', ends - now} end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], member)
redis.call('ZREM', KEYS[3], member)
return {'gone', ends - now}
