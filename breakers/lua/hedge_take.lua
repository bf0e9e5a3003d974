-- hedge_take.lua: take one hedge from the fleet's hedge budget, if it holds one.
--
-- KEYS[1]  the hedge budget (hash: milli -> thousandths of a hedge)
-- ARGV[1]  clock (unused)  ARGV[2]  the budget's size in thousandths (the burst)
--
-- Refills land uncapped (one HINCRBY each); the size applies here. Returns 1 or 0.

local cap = tonumber(ARGV[2])
local held = tonumber(redis.call('HGET', KEYS[1], 'milli')) or 0
if held > cap then held = cap end
if held < 1000 then
  redis.call('HSET', KEYS[1], 'milli', held)
  return 0
end
redis.call('HSET', KEYS[1], 'milli', held - 1000)
return 1
