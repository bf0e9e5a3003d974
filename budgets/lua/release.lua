-- release.lua: drop a reservation without charging it (the attempt failed).
--
-- KEYS[1] held hash   KEYS[2] holds zset   KEYS[3] charge hash
-- ARGV[1] clock (clock.lua)   ARGV[2] charge id
--
-- Returns {released 0/1, released micros, reclaimed, now_ms}; 0 when the charge was not
-- held (unknown, already released, expired or settled: a settled charge stays charged).

local charge_id = ARGV[2]
local now = now_ms()
local reclaimed = reclaim(KEYS[1], KEYS[2], now)
if redis.call('HGET', KEYS[3], 'state') ~= 'reserved' or not live_hold(KEYS[1], charge_id) then
  return {0, 0, reclaimed, now}
end
local micros = drop_hold(KEYS[1], KEYS[2], charge_id)
redis.call('HSET', KEYS[3], 'state', 'released')
return {1, micros, reclaimed, now}
