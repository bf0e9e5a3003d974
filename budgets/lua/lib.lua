-- lib.lua: helpers prepended to every budgets script (not a script on its own).
--
-- Money is integer micro-dollars. Lua numbers are doubles: exact below 2^53,
-- and budgets caps every amount at 10^15, so sums stay exact. Numbers going
-- back to Redis are formatted with %d, never tostring (which may print 1e+15).

local function int(n)
  return string.format('%d', n)
end

local function num(v)
  if v == false or v == nil or v == '' then
    return 0
  end
  return tonumber(v)
end

-- Milliseconds since the epoch on the Redis server's clock, or the override
-- that tests pass (an empty string means "use the server's clock").
local function now_ms(override)
  if override ~= nil and override ~= '' then
    return tonumber(override)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- UTC day ('YYYY-MM-DD') and month ('YYYY-MM') of a millisecond timestamp
-- (days-to-civil of H. Hinnant, proleptic Gregorian calendar).
local function periods(ms)
  local z = math.floor(ms / 86400000) + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m
  if mp < 10 then m = mp + 3 else m = mp - 9 end
  if m <= 2 then y = y + 1 end
  return string.format('%04d-%02d-%02d', y, m, d), string.format('%04d-%02d', y, m)
end

-- A hold is stored in the held hash as "<micros>|<0 or 1 for fallback>".
local function parse_hold(v)
  local sep = string.find(v, '|', 1, true)
  return tonumber(string.sub(v, 1, sep - 1)), string.sub(v, sep + 1)
end

-- Drop one hold and its share of the running totals; returns the micros it held.
local function drop_hold(held, holds, charge_id)
  local v = redis.call('HGET', held, charge_id)
  redis.call('ZREM', holds, charge_id)
  if not v then
    return 0
  end
  local micros, fallback = parse_hold(v)
  redis.call('HDEL', held, charge_id)
  redis.call('HINCRBY', held, '=total', int(-micros))
  if fallback == '1' then
    redis.call('HINCRBY', held, '=fallback', int(-micros))
  end
  return micros
end

-- Reclaim holds whose expiry (server time) has passed: a dead worker's
-- reservation stops counting against the budget. ZREM inside the script makes
-- each one reclaimed exactly once. Bounded per call; leftovers wait for the next.
local function reclaim(held, holds, charge_prefix, now)
  local expired = redis.call('ZRANGEBYSCORE', holds, '-inf', int(now), 'LIMIT', 0, 500)
  for _, charge_id in ipairs(expired) do
    drop_hold(held, holds, charge_id)
    local ck = charge_prefix .. charge_id
    if redis.call('HGET', ck, 'state') == 'reserved' then
      redis.call('HSET', ck, 'state', 'expired')
    end
  end
  if #expired > 0 then
    redis.call('HINCRBY', held, '=reclaimed', #expired)
  end
  return #expired
end

-- Keep the held hash and the expiry set alive until their last hold has
-- expired, plus a grace; both share one deadline so neither outlives the other.
local function refresh_hold_ttl(held, holds, now, grace_ms)
  local last = redis.call('ZRANGE', holds, -1, -1, 'WITHSCORES')
  local until_ms = now
  if #last == 2 then
    until_ms = math.max(now, tonumber(last[2]))
  end
  local ttl = until_ms - now + grace_ms
  redis.call('PEXPIRE', held, int(ttl))
  if #last == 2 then
    redis.call('PEXPIRE', holds, int(ttl))
  end
end

