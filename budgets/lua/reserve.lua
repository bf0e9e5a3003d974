-- reserve.lua: hold a worst-case amount for one charge, if the budget allows it.
--
-- KEYS[1] limits hash   KEYS[2] held hash   KEYS[3] holds zset (score: expiry ms)
-- KEYS[4] charge hash   KEYS[5] tenants set   KEYS[6..9] day and month candidates (lib.lua)
-- ARGV[1] clock (clock.lua)   ARGV[2] tenant   ARGV[3] charge id   ARGV[4] micros
-- ARGV[5] fallback "1"/"0"   ARGV[6] provider   ARGV[7] hold ttl ms   ARGV[8] hold grace ms
-- ARGV[9] charge record ttl ms
-- ARGV[10] default daily micros ("" = refuse unknown tenants)   ARGV[11] default monthly
-- ARGV[12] default fallback cap ("" = none)   ARGV[13..16] the candidates' periods
--
-- Returns {state "reserved"|"settled"|"refused", replayed 0/1, micros, expires_at_ms,
--          fallback "1"/"0", provider, reclaimed, reason, period, remaining micros, now_ms}

local tenant, charge_id = ARGV[2], ARGV[3]
local micros, fallback, provider = tonumber(ARGV[4]), ARGV[5], ARGV[6]
local now = now_ms()
local dk, mk = period_keys(6, 13, now)
local reclaimed = reclaim(KEYS[2], KEYS[3], now)

-- Idempotency: a live hold or a settled charge is returned as it is.
local rec = redis.call('HMGET', KEYS[4], 'state', 'micros', 'expires_at', 'fallback', 'provider', 'actual')
if rec[1] == 'reserved' and live_hold(KEYS[2], charge_id) then
  return {'reserved', 1, num(rec[2]), num(rec[3]), rec[4], rec[5], reclaimed, '', '', 0, now}
elseif rec[1] == 'settled' then
  return {'settled', 1, num(rec[6]), 0, rec[4], rec[5], reclaimed, '', '', 0, now}
end

local function refuse(reason, period, remaining)
  return {'refused', 0, micros, 0, fallback, provider, reclaimed, reason, period,
    math.max(0, remaining), now}
end

local lim = redis.call('HMGET', KEYS[1], 'daily', 'monthly', 'fallback_cap')
if not lim[1] then
  if ARGV[10] == '' then
    return refuse('unknown_tenant', '', 0)
  end
  lim = {ARGV[10], ARGV[11], ARGV[12]}
end

local held = redis.call('HMGET', KEYS[2], '=total', '=fallback')
local held_total, held_fallback = num(held[1]), num(held[2])

local day_left = tonumber(lim[1]) - num(redis.call('HGET', dk, 'spent')) - held_total
if micros > day_left then
  return refuse('tenant_budget_exhausted', 'day', day_left)
end
local month_left = tonumber(lim[2]) - num(redis.call('HGET', mk, 'spent')) - held_total
if micros > month_left then
  return refuse('tenant_budget_exhausted', 'month', month_left)
end
if fallback == '1' and lim[3] and lim[3] ~= '' then
  local cap_left = tonumber(lim[3]) - num(redis.call('HGET', dk, 'fallback')) - held_fallback
  if micros > cap_left then
    return refuse('fallback_cap_reached', 'day', cap_left)
  end
end

local expires_at = now + tonumber(ARGV[7])
redis.call('HSET', KEYS[2], charge_id, int(micros) .. '|' .. fallback)
redis.call('HINCRBY', KEYS[2], '=total', int(micros))
if fallback == '1' then
  redis.call('HINCRBY', KEYS[2], '=fallback', int(micros))
end
redis.call('ZADD', KEYS[3], int(expires_at), charge_id)
refresh_hold_ttl(KEYS[2], KEYS[3], now, tonumber(ARGV[8]))

redis.call('HSET', KEYS[4], 'state', 'reserved', 'micros', int(micros),
  'expires_at', int(expires_at), 'fallback', fallback, 'provider', provider)
redis.call('PEXPIRE', KEYS[4], ARGV[9])
redis.call('SADD', KEYS[5], tenant)
return {'reserved', 0, micros, expires_at, fallback, provider, reclaimed, '', '', 0, now}
