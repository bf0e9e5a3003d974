-- kill_on.lua: a person turns the kill switch on (or changes its reason).
--
-- KEYS[1] kill switch hash   ARGV[1] who   ARGV[2] why
-- Returns the server time (ms) it was turned on. The key has no TTL: only a person
-- turns it off.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'who', ARGV[1], 'why', ARGV[2], 'since_ms', now)
return now
