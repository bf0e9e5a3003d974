-- acquire.lua: may this caller call the scope now? Takes a half-open probe slot if needed.
--
-- KEYS[1]  breaker hash          KEYS[2]  probe zset (holder -> slot expiry ms)
-- ARGV[1]  holder id             ARGV[2]  probe slot TTL (ms)     ARGV[3]  probes allowed
--
-- Returns 2 when the breaker is closed (call normally, no slot needed), 1 when the caller
-- holds a probe slot (newly or already), 0 when open or every slot is taken.
-- A slot whose holder died expires after the TTL and the next caller gets it.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holder, ttl, probes = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local h = redis.call('HMGET', KEYS[1], 'state', 'until_ms', 'pinned')
if h[1] ~= 'open' then return 2 end
if h[3] == '1' or now < (tonumber(h[2]) or 0) then return 0 end

redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local mine = redis.call('ZSCORE', KEYS[2], holder)
if mine then return 1 end
if redis.call('ZCARD', KEYS[2]) >= probes then return 0 end
redis.call('ZADD', KEYS[2], now + ttl, holder)
redis.call('PEXPIRE', KEYS[2], ttl)
return 1
