-- release.lua: a turn concluded; give its tenant's lease back.
--
-- KEYS[1..8]  as lib.lua          KEYS[9]  leases zset ("<tenant>|<turn>" -> expiry ms)
-- KEYS[10] inflight hash (tenant -> leases held)   KEYS[11] wake list (as enqueue.lua's)
-- ARGV[1]  clock (clock.lua)      ARGV[2]  tenant       ARGV[3]  turn id
--
-- Returns 1 when a lease was given back, 0 when there was none (not dispatched by the
-- fair queue, expired, or given back already). A tenant parked for its concurrency is
-- looked at again at the next dispatch round, which the wake token starts: a thread of the
-- fleet is free.

local tenant = ARGV[2]
if redis.call('ZREM', KEYS[9], tenant .. '|' .. ARGV[3]) == 0 then
  return 0
end
if redis.call('HINCRBY', KEYS[10], tenant, -1) <= 0 then
  redis.call('HDEL', KEYS[10], tenant)
end
redis.call('ZADD', PARKED, 'XX', now_ms(), tenant)
wake(KEYS[11])
return 1
