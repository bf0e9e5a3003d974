-- kill_on.lua: a person turns the kill switch on (or changes its reason).
--
-- KEYS[1] kill switch hash   ARGV[1] clock (clock.lua)   ARGV[2] who   ARGV[3] why
-- Returns the time (ms) it was turned on. The key has no TTL: only a person
-- turns it off. A switch a worker restored (kill_restore.lua) is a person's from now on.

local now = now_ms()
redis.call('HSET', KEYS[1], 'who', ARGV[2], 'why', ARGV[3], 'since_ms', now)
redis.call('HDEL', KEYS[1], 'restored')
return now
