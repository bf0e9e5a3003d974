-- release.lua: drop a reservation without charging it (the provider did not bill the call).
--
-- KEYS[1..7] and ARGV[1..8]: every script's (lib.lua)
-- KEYS[8] charge hash
-- ARGV[9] charge id
--
-- Returns {released 0/1, released micros, reclaimed, refunded micros, now_ms}. Nothing is
-- released when the charge was not held (unknown, already released or settled: a settled
-- charge stays charged). A charge whose hold was reclaimed, and so charged at its
-- reservation, is refunded: the call it was for was not billed.

local charge_id = ARGV[9]
local now, dk, mk, _, _, reclaimed = begin()
local state = redis.call('HGET', KEYS[8], 'state')
if state ~= 'reserved' then
  return {0, 0, reclaimed, 0, now}
end
if live_hold(charge_id) then
  local micros = drop_hold(charge_id)
  redis.call('HSET', KEYS[8], 'state', 'released')
  return {1, micros, reclaimed, 0, now}
end
local refunded, fallback, provider, labels = unreclaim(charge_id)
if refunded > 0 then
  add_spend(dk, mk, -refunded, fallback, provider, labels)
  redis.call('HSET', KEYS[8], 'state', 'released')
end
return {0, 0, reclaimed, refunded, now}
