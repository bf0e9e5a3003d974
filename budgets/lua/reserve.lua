-- reserve.lua: hold an attempt's expected cost, if the budget allows it and its worst case.
--
-- KEYS[1..7] and ARGV[1..8]: every script's (lib.lua)
-- KEYS[8] limits hash   KEYS[9] charge hash
-- ARGV[9] tenant   ARGV[10] charge id   ARGV[11] micros (held)   ARGV[12] worst micros
-- ARGV[13] fallback "1"/"0"   ARGV[14] provider   ARGV[15] hold ttl ms   ARGV[16] hold grace ms
-- ARGV[17] default daily micros ("" = refuse unknown tenants)   ARGV[18] default monthly
-- ARGV[19] default fallback cap ("" = none)   ARGV[20] default overdraft micros
-- ARGV[21] the charge's labels for spend attribution ("" or absent: none; lib.lua)
--
-- Returns {state "reserved"|"settled"|"refused", replayed 0/1, micros, expires_at_ms,
--          fallback "1"/"0", provider, reclaimed, reason, period, free micros,
--          held micros, now_ms, room micros}
--
-- `room` is what the tenant's worst cases may still take, once this attempt is held
-- (a refusal: as it stands): the least over the day and the month of
-- limit + overdraft - spent - held worst, at least 0; "" on a replay. A worker keeps it
-- as the most it may admit for the tenant while Redis does not answer.
--
-- Two rules, for the day, the month and (fallback attempts) the fallback cap, where
-- `left` is the limit minus what is spent:
--   expected: held + micros <= left           the money the tenant has
--   worst:    held worst + worst <= left + overdraft
-- Each charge costs at most its worst case, so spend never passes limit + overdraft;
-- with overdraft 0 the worst rule alone decides, which is the strict budget. A refusal
-- says `*_held` when the holds of attempts in flight are what is in the way (they will
-- settle, usually for less), and `tenant_budget_exhausted` / `fallback_cap_reached` when
-- the attempt does not fit even with nothing held.

local charge_id = ARGV[10]
local micros, worst, fallback, provider = tonumber(ARGV[11]), tonumber(ARGV[12]), ARGV[13], ARGV[14]
local labels = ARGV[21] or ''
local now, dk, mk, _, _, reclaimed = begin()

-- Idempotency: a live hold or a settled charge is returned as it is.
local rec = redis.call('HMGET', KEYS[9], 'state', 'micros', 'expires_at', 'fallback', 'provider', 'actual')
if rec[1] == 'reserved' and live_hold(charge_id) then
  return {'reserved', 1, num(rec[2]), num(rec[3]), rec[4], rec[5], reclaimed, '', '', 0, 0, now, ''}
elseif rec[1] == 'settled' then
  return {'settled', 1, num(rec[6]), 0, rec[4], rec[5], reclaimed, '', '', 0, 0, now, ''}
end

local room = 0
local function refuse(reason, period, free, held)
  return {'refused', 0, micros, 0, fallback, provider, reclaimed, reason, period,
    math.max(0, free), held, now, room}
end

local lim = redis.call('HMGET', KEYS[8], 'daily', 'monthly', 'fallback_cap', 'overdraft')
if not lim[1] then
  if ARGV[17] == '' then
    return refuse('unknown_tenant', '', 0, 0)
  end
  lim = {ARGV[17], ARGV[18], ARGV[19], ARGV[20]}
end
local overdraft = num(lim[4])

local held = redis.call('HMGET', HELD, '=total', '=worst', '=fallback', '=fallback_worst')
local held_total, held_worst = num(held[1]), num(held[2])
local day_left = tonumber(lim[1]) - num(redis.call('HGET', dk, 'spent'))
local month_left = tonumber(lim[2]) - num(redis.call('HGET', mk, 'spent'))
room = math.max(0, math.min(day_left, month_left) + overdraft - held_worst)

-- The refusal for one limit, or nil when the attempt fits it.
local function check(left, held_micros, held_worst_micros, exhausted, full, period)
  if micros > left or worst > left + overdraft then
    return refuse(exhausted, period, left - held_micros, held_micros)
  end
  if micros > left - held_micros or worst > left + overdraft - held_worst_micros then
    return refuse(full, period, left - held_micros, held_micros)
  end
  return nil
end

local refusal = check(day_left, held_total, held_worst, 'tenant_budget_exhausted',
    'tenant_budget_held', 'day')
  or check(month_left, held_total, held_worst, 'tenant_budget_exhausted', 'tenant_budget_held',
    'month')
if not refusal and fallback == '1' and lim[3] and lim[3] ~= '' then
  refusal = check(tonumber(lim[3]) - num(redis.call('HGET', dk, 'fallback')), num(held[3]),
    num(held[4]), 'fallback_cap_reached', 'fallback_cap_held', 'day')
end
if refusal then
  return refusal
end

local expires_at = now + tonumber(ARGV[15])
-- The labels travel with the hold and the charge record: whichever script charges it
-- (its settlement, or a reclaim in anyone's script) attributes it the same.
local hold = int(micros) .. '|' .. fallback .. '|' .. int(worst) .. '|' .. provider
if labels ~= '' then hold = hold .. '|' .. labels end
redis.call('HSET', HELD, charge_id, hold)
redis.call('HINCRBY', HELD, '=total', int(micros))
redis.call('HINCRBY', HELD, '=worst', int(worst))
if fallback == '1' then
  redis.call('HINCRBY', HELD, '=fallback', int(micros))
  redis.call('HINCRBY', HELD, '=fallback_worst', int(worst))
end
redis.call('ZADD', HOLDS, int(expires_at), charge_id)
refresh_hold_ttl(now, tonumber(ARGV[16]))

redis.call('HSET', KEYS[9], 'state', 'reserved', 'micros', int(micros),
  'expires_at', int(expires_at), 'fallback', fallback, 'provider', provider)
if labels ~= '' then redis.call('HSET', KEYS[9], 'labels', labels) end
redis.call('PEXPIRE', KEYS[9], ARGV[8])
return {'reserved', 0, micros, expires_at, fallback, provider, reclaimed, '', '', 0, 0, now,
  math.max(0, room - worst)}
