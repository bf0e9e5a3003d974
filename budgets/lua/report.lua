-- report.lua: one consistent snapshot of a tenant's budget for operators.
--
-- KEYS[1] limits hash   KEYS[2] held hash   KEYS[3] holds zset   KEYS[4] tenants set
-- KEYS[5..8] day and month candidates (lib.lua)
-- ARGV[1] clock (clock.lua)   ARGV[2] tenant   ARGV[3..6] the candidates' periods
--
-- Returns {now_ms, day, month, known 0/1, configured limits {daily, monthly, fallback_cap}
--          (false when absent), held total, held fallback, reclaimed so far,
--          day hash (flat field/value list), month hash (flat), reclaimed now}

local tenant = ARGV[2]
local now = now_ms()
local dk, mk, day, month = period_keys(5, 3, now)
local reclaimed = reclaim(KEYS[2], KEYS[3], now)
local known = redis.call('SISMEMBER', KEYS[4], tenant)
local lim = redis.call('HMGET', KEYS[1], 'daily', 'monthly', 'fallback_cap')
local held = redis.call('HMGET', KEYS[2], '=total', '=fallback', '=reclaimed')
return {now, day, month, known, lim, num(held[1]), num(held[2]), num(held[3]),
  redis.call('HGETALL', dk), redis.call('HGETALL', mk), reclaimed}
