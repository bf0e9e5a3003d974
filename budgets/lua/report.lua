-- report.lua: one consistent snapshot of a tenant's budget for operators.
--
-- KEYS[1] limits hash   KEYS[2] held hash   KEYS[3] holds zset   KEYS[4] tenants set
-- ARGV[1] tenant key prefix   ARGV[2] tenant   ARGV[3] now ms override ("" = server TIME)
--
-- Returns {now_ms, day, month, known 0/1, configured limits {daily, monthly, fallback_cap}
--          (false when absent), held total, held fallback, reclaimed so far,
--          day hash (flat field/value list), month hash (flat), reclaimed now}

local prefix, tenant = ARGV[1], ARGV[2]
local now = now_ms(ARGV[3])
local reclaimed = reclaim(KEYS[2], KEYS[3], prefix .. 'charge:', now)
local day, month = periods(now)
local known = redis.call('SISMEMBER', KEYS[4], tenant)
local lim = redis.call('HMGET', KEYS[1], 'daily', 'monthly', 'fallback_cap')
local held = redis.call('HMGET', KEYS[2], '=total', '=fallback', '=reclaimed')
return {now, day, month, known, lim, num(held[1]), num(held[2]), num(held[3]),
  redis.call('HGETALL', prefix .. 'day:' .. day),
  redis.call('HGETALL', prefix .. 'month:' .. month), reclaimed}
