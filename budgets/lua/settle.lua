-- settle.lua: turn a charge into spend, exactly once per charge id.
--
-- KEYS[1] held hash   KEYS[2] holds zset   KEYS[3] charge hash   KEYS[4] tenants set
-- ARGV[1] tenant key prefix   ARGV[2] tenant   ARGV[3] now ms override ("" = server TIME)
-- ARGV[4] hold grace ms (unused here; common layout)
-- ARGV[5] charge id   ARGV[6] actual micros
-- ARGV[7] fallback hint "1"/"0"/"" and ARGV[8] provider hint: used only when no
--         reservation record survives (the record's own values win)
-- ARGV[9] charge record ttl ms   ARGV[10] day key ttl ms   ARGV[11] month key ttl ms
--
-- Returns {replayed 0/1, charged micros (this call), settled micros (the charge),
--          released hold micros, fallback "1"/"0", provider, day, month, reclaimed, now_ms}

local prefix, tenant, charge_id = ARGV[1], ARGV[2], ARGV[5]
local actual = tonumber(ARGV[6])
local now = now_ms(ARGV[3])
local reclaimed = reclaim(KEYS[1], KEYS[2], prefix .. 'charge:', now)

local rec = redis.call('HMGET', KEYS[3], 'state', 'fallback', 'provider', 'actual', 'day', 'month')
local fallback = rec[2] or ARGV[7]
local provider = rec[3] or ARGV[8]
if fallback ~= '1' then fallback = '0' end
if rec[1] == 'settled' then
  return {1, 0, num(rec[4]), 0, fallback, provider, rec[5] or '', rec[6] or '', reclaimed, now}
end

local released = 0
if rec[1] == 'reserved' then
  released = drop_hold(KEYS[1], KEYS[2], charge_id)
end

local day, month = periods(now)
local dk, mk = prefix .. 'day:' .. day, prefix .. 'month:' .. month
for _, spec in ipairs({{dk, ARGV[10]}, {mk, ARGV[11]}}) do
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
redis.call('PEXPIRE', KEYS[3], ARGV[9])
redis.call('SADD', KEYS[4], tenant)
return {0, actual, actual, released, fallback, provider, day, month, reclaimed, now}
