-- force.lua: an operator opens, closes or resets one breaker.
--
-- KEYS[1] breaker hash   KEYS[2] window hash   KEYS[3] probe zset   KEYS[4] scope index
-- ARGV[1] clock (clock.lua)   ARGV[2] "open" | "close" | "reset"
-- ARGV[3] break ms for "open" (0 = pinned open until closed: the key then has no TTL,
--         because a person, not a worker, left it there)
-- ARGV[4] state TTL ms   ARGV[5] scope   ARGV[6] index TTL ms
--
-- Returns the state before: "closed" | "open" | "half_open".
-- open:  open now (window and probe slots cleared); close: closed now, probe slots and the
-- failure streak cleared; reset: every key of the scope deleted and its index entry removed.

local now = now_ms()
local op, ms, ttl, scope, index_ttl = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])

local h = redis.call('HMGET', KEYS[1], 'state', 'until_ms', 'pinned')
local before = phase(h[1], h[2], h[3], now)

if op == 'open' then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  redis.call('HSET', KEYS[1], 'state', 'open', 'opened_at_ms', now, 'until_ms', now + ms,
    'break_ms', math.max(ms, 1), 'streak', 0)
  if ms == 0 then
    redis.call('HSET', KEYS[1], 'pinned', 1)
  else
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
elseif op == 'close' then
  redis.call('DEL', KEYS[1], KEYS[3])
else
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  redis.call('ZREM', KEYS[4], scope)
  return before
end
redis.call('ZADD', KEYS[4], now, scope)
redis.call('PEXPIRE', KEYS[4], index_ttl)
return before
