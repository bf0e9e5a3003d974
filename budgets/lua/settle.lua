-- settle.lua: turn a charge into spend, exactly once per charge id.
--
-- KEYS[1] held hash   KEYS[2] holds zset   KEYS[3] charge hash   KEYS[4] tenants set
-- KEYS[5..8] day and month candidates (lib.lua)
-- ARGV[1] clock (clock.lua)   ARGV[2] tenant   ARGV[3] charge id   ARGV[4] actual micros
-- ARGV[5] fallback hint "1"/"0"/"" and ARGV[6] provider hint: used only when no
--         reservation record survives (the record's own values win)
-- ARGV[7] charge record ttl ms   ARGV[8] day key ttl ms   ARGV[9] month key ttl ms
-- ARGV[10..13] the candidates' periods
--
-- Returns {replayed 0/1, charged micros (this call), settled micros (the charge),
--          released hold micros, fallback "1"/"0", provider, day, month, reclaimed, now_ms}
-- The spend counts in the day and month current when it is settled.

local tenant, charge_id = ARGV[2], ARGV[3]
local actual = tonumber(ARGV[4])
local now = now_ms()
local dk, mk, day, month = period_keys(5, 10, now)
local reclaimed = reclaim(KEYS[1], KEYS[2], now)

local rec = redis.call('HMGET', KEYS[3], 'state', 'fallback', 'provider', 'actual', 'day', 'month')
local fallback = rec[2] or ARGV[5]
local provider = rec[3] or ARGV[6]
if fallback ~= '1' then fallback = '0' end
if rec[1] == 'settled' then
  return {1, 0, num(rec[4]), 0, fallback, provider, rec[5] or '', rec[6] or '', reclaimed, now}
end

local released = 0
if rec[1] == 'reserved' then
  released = drop_hold(KEYS[1], KEYS[2], charge_id)
end

for _, spec in ipairs({{dk, ARGV[8]}, {mk, ARGV[9]}}) do
  local key = spec[1]
  redis.call('HINCRBY', key, 'spent', int(actual))
  if fallback == '1' then
    redis.call('HINCRBY', key, 'fallback', int(actual))
    redis.call('HINCRBY', key, 'fb:' .. provider, int(actual))
  end
  redis.call('PEXPIRE', key, spec[2])
end

redis.call('HSET', KEYS[3], 'state', 'settled', 'actual', int(actual), 'fallback', fallback,
  'provider', provider, 'day', day, 'month', month, 'settled_at', int(now))
redis.call('PEXPIRE', KEYS[3], ARGV[7])
redis.call('SADD', KEYS[4], tenant)
return {0, actual, actual, released, fallback, provider, day, month, reclaimed, now}
