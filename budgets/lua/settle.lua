-- settle.lua: turn a charge into spend, exactly once per charge id.
--
-- KEYS[1..7] and ARGV[1..8]: every script's (lib.lua)
-- KEYS[8] charge hash
-- ARGV[9] tenant   ARGV[10] charge id   ARGV[11] actual micros
-- ARGV[12] fallback hint "1"/"0"/"" and ARGV[13] provider hint: used only when no
--          reservation record survives (the record's own values win)
-- ARGV[14] labels hint for spend attribution (lib.lua), likewise
--
-- Returns {replayed 0/1, charged micros (this call), settled micros (the charge),
--          released hold micros, fallback "1"/"0", provider, day, month, reclaimed,
--          micros its reclaim had charged, now_ms}
-- The spend counts in the day and month current when it is settled. A charge whose hold
-- was reclaimed (and so charged at its reservation) is corrected to `actual`.

local charge_id = ARGV[10]
local actual = tonumber(ARGV[11])
local now, dk, mk, day, month, reclaimed = begin()

local rec = redis.call('HMGET', KEYS[8], 'state', 'fallback', 'provider', 'actual', 'day', 'month',
  'labels')
local fallback = rec[2] or ARGV[12]
local provider = rec[3] or ARGV[13]
local labels = rec[7] or ARGV[14] or ''
if fallback ~= '1' then fallback = '0' end
if rec[1] == 'settled' then
  return {1, 0, num(rec[4]), 0, fallback, provider, rec[5] or '', rec[6] or '', reclaimed, 0, now}
end

local released = 0
if rec[1] == 'reserved' then
  released = drop_hold(charge_id)
end
-- A reclaim charged the hold's labels, the record's: the correction goes to the same.
local precharged = unreclaim(charge_id)
add_spend(dk, mk, actual - precharged, fallback, provider, labels)

redis.call('HSET', KEYS[8], 'state', 'settled', 'actual', int(actual), 'fallback', fallback,
  'provider', provider, 'day', day, 'month', month, 'settled_at', int(now))
if labels ~= '' then redis.call('HSET', KEYS[8], 'labels', labels) end
redis.call('PEXPIRE', KEYS[8], ARGV[8])
return {0, actual - precharged, actual, released, fallback, provider, day, month, reclaimed,
  precharged, now}
