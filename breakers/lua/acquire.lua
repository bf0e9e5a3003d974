-- acquire.lua: may this caller call the scope now? Takes a half-open probe slot if needed.
--
-- KEYS[1]  breaker hash          KEYS[2]  probe zset (holder -> slot expiry ms)
-- ARGV[1]  clock (clock.lua)     ARGV[2]  holder id     ARGV[3]  probe slot TTL (ms)
-- ARGV[4]  probes allowed
--
-- Returns 2 when the breaker is closed (call normally, no slot needed), 1 when the caller
-- holds a probe slot (newly or already), 0 when open or every slot is taken.
-- A slot whose holder died expires after the TTL and the next caller gets it.

local now = now_ms()
local holder, ttl, probes = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

local h = redis.call('HMGET', KEYS[1], 'state', 'until_ms', 'pinned')
local state = phase(h[1], h[2], h[3], now)
if state == 'closed' then return 2 end
if state == 'open' then return 0 end

redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local mine = redis.call('ZSCORE', KEYS[2], holder)
if mine then return 1 end
if redis.call('ZCARD', KEYS[2]) >= probes then return 0 end
redis.call('ZADD', KEYS[2], now + ttl, holder)
redis.call('PEXPIRE', KEYS[2], ttl)
return 1
