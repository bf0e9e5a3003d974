-- release.lua: drop a reservation without charging it (the attempt failed).
--
-- KEYS[1] held hash   KEYS[2] holds zset   KEYS[3] charge hash
-- ARGV[1] tenant key prefix   ARGV[2] tenant   ARGV[3] now ms override ("" = server TIME)
-- ARGV[4] hold grace ms (unused here; common layout)   ARGV[5] charge id
--
-- Returns {released 0/1, released micros, reclaimed, now_ms}; 0 when the charge was not
-- held (unknown, already released, expired or settled: a settled charge stays charged).

local prefix, charge_id = ARGV[1], ARGV[5]
local now = now_ms(ARGV[3])
local reclaimed = reclaim(KEYS[1], KEYS[2], prefix .. 'charge:', now)
if redis.call('HGET', KEYS[3], 'state') ~= 'reserved' then
  return {0, 0, reclaimed, now}
end
local micros = drop_hold(KEYS[1], KEYS[2], charge_id)
redis.call('HSET', KEYS[3], 'state', 'released')
return {1, micros, reclaimed, now}
