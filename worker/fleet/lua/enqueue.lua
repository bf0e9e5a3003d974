-- enqueue.lua: put a turn at the end of its tenant's queue (a producer, through the broker).
--
-- KEYS[1..8]  as lib.lua          KEYS[9]  seq string (the queue's sequence number)
-- KEYS[10] wake list: a token the idle dispatchers block on
-- KEYS[11] deadlines zset "<tenant>|<seq>" -> queue deadline ms (dispatch.lua ends the
--          turns past it whatever holds their tenant)
-- ARGV[1]  clock (clock.lua)     ARGV[2]  tenant       ARGV[3]  turn id
-- ARGV[4]  queue deadline (ms from now)                ARGV[5]  input tokens (estimate)
-- ARGV[6]  the broker message, as the broker would have queued it
--
-- Returns 1 when queued, 0 when that turn id is queued already (a re-send while it waits).
-- Eight commands for a ready tenant with turns queued already: the index's HSETNX is the
-- check for a duplicate, and the queued count going from 0 to 1 says the tenant was idle
-- (in neither ready nor parked, lib.lua); any other count is checked against ready.

local now = now_ms()
local tenant, turn = ARGV[2], ARGV[3]
local ok, seq = pcall(redis.call, 'INCR', KEYS[9])
if not ok then
  -- A sequence number that is not one (a hand edit) or at its end would refuse every
  -- tenant's turns: it starts again past any a queue could have reached (ms * 1000), so
  -- each tenant's turns stay in order.
  seq = math.floor(now) * 1000
  redis.call('SET', KEYS[9], string.format('%d', seq))
end
local member = tenant .. '|' .. string.format('%016d', seq)
if redis.call('HSETNX', INDEX, turn, member) == 0 then
  -- Queued already; unless the index names an entry no longer queued (a hand edit, a
  -- release that left it): that turn would never be queued again, so it is now.
  if redis.call('ZSCORE', PENDING, redis.call('HGET', INDEX, turn)) then
    return 0
  end
  redis.call('HSET', INDEX, turn, member)
end
local deadline = now + tonumber(ARGV[4])
redis.call('ZADD', PENDING, 0, member)
redis.call('HSET', MSGS, member,
  turn .. '|' .. int(now) .. '|' .. int(deadline) .. '|' .. ARGV[5] .. '|' .. ARGV[6])
if KEYS[11] then
  redis.call('ZADD', KEYS[11], deadline, member)
end
local counted, queued = pcall(redis.call, 'HINCRBY', QUEUED, tenant, 1)
if not counted then
  -- A count that is not a number (a hand edit) is counted again from the tenant's queue.
  queued = redis.call('ZLEXCOUNT', PENDING, '[' .. tenant .. '|', '(' .. tenant .. '|\255')
  redis.call('HSET', QUEUED, tenant, queued)
end
-- A count other than 1 says the tenant had turns queued already, so it is ready or parked;
-- unless the count is damaged (a producer may HINCRBY any tenant's): then a tenant in
-- neither is idle, and only activating it gets its turns dispatched. One ZSCORE while it
-- is ready.
if queued == 1 or not (redis.call('ZSCORE', READY, tenant)
    or redis.call('ZSCORE', PARKED, tenant)) then
  activate(tenant, clock_now())
  wake(KEYS[10])
end
return 1
