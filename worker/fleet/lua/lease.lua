-- lease.lua: a worker starts a turn; its tenant's lease is held while it runs.
--
-- KEYS[1..8]  as lib.lua          KEYS[9]  leases zset ("<tenant>|<turn>" -> expiry ms)
-- KEYS[10] inflight hash (tenant -> leases held)   KEYS[11] shares hash (dispatch.lua's)
-- ARGV[1]  clock (clock.lua)      ARGV[2]  tenant       ARGV[3]  turn id
-- ARGV[4]  ms the lease holds from now unless renewed (the holder renews it with its
--          heartbeat: a dead holder's lease ends when its heartbeat would say it is dead)
-- ARGV[5]  the default share, as KEYS[11]'s values
--
-- Returns {held, damaged}: held is 1 when the turn holds a lease now: the one dispatch took for it, or a new one
-- (a turn redelivered after its lease ran out, or one that came past the fair queue)
-- while the tenant holds fewer than its max_in_flight; 0 when the tenant holds that many
-- already: the turn waits for one, so that the bound holds fleet-wide.

local damaged, gone = set_aside_damaged({[9] = 'zset', [10] = 'hash', [11] = 'hash'})
recount_leases(gone, 9, 10)
local now = now_ms()
local tenant = ARGV[2]
local member = tenant .. '|' .. ARGV[3]
local expiry = now + tonumber(ARGV[4])
if redis.call('ZSCORE', KEYS[9], member) then
  redis.call('ZADD', KEYS[9], 'XX', expiry, member)
  return {1, damaged}
end
local raw = redis.call('HGET', KEYS[11], tenant)
local share = (raw and parse_share(raw)) or parse_share(ARGV[5])
local mif = share and share[1]
if mif and num(redis.call('HGET', KEYS[10], tenant)) >= mif then
  return {0, damaged}
end
redis.call('ZADD', KEYS[9], expiry, member)
redis.call('HINCRBY', KEYS[10], tenant, 1)
return {1, damaged}
