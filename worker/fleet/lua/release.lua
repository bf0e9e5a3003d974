-- release.lua: a turn concluded; give its tenant's lease back. For a process with no
-- dispatcher of its own: a dispatcher gives back its process's leases in its next round
-- (dispatch.lua), which spares the fleet this script and its wake-up.
--
-- KEYS[1..8]  as lib.lua          KEYS[9]  leases zset ("<tenant>|<turn>" -> expiry ms)
-- KEYS[10] inflight hash (tenant -> leases held)   KEYS[11] wake list (as enqueue.lua's)
-- ARGV[1]  clock (clock.lua)      ARGV[2]  tenant       ARGV[3]  turn id
--
-- Returns {given, damaged}: given is 1 when a lease was given back, 0 when there was none (not dispatched by the
-- fair queue, expired, or given back already). A tenant parked for its concurrency is
-- looked at again at the next dispatch round, which the wake token starts: a thread of the
-- fleet is free. damaged: "<key>|<type>" per key of the wrong type set aside first
-- (lib.lua's set_aside_damaged); a parked set of the wrong type is the next round's to
-- set aside (dispatch.lua puts its tenants back).

local damaged, gone = set_aside_damaged({[9] = 'zset', [10] = 'hash'})
recount_leases(gone, 9, 10)
local tenant = ARGV[2]
if redis.call('ZREM', KEYS[9], tenant .. '|' .. ARGV[3]) == 0 then
  return {0, damaged}
end
if redis.call('HINCRBY', KEYS[10], tenant, -1) <= 0 then
  redis.call('HDEL', KEYS[10], tenant)
end
-- Due at once if a limit parked it (score 0; XX: a tenant not parked stays as it is).
pcall(redis.call, 'ZADD', PARKED, 'XX', 0, tenant)
wake(KEYS[11])
return {1, damaged}
