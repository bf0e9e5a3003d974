-- lib.lua: helpers prepended to every budgets script, after clock.lua (not a script on its own).
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

-- The spend hashes of the UTC day and month at `now`, the script's clock. The client
-- cannot read that clock before it sends, so it passes the periods of two instants,
-- 12 h before and after its own clock: KEYS[k .. k+3] (day, day, month, month), named
-- by ARGV[a .. a+3]. One of each is the script's when the clocks are within 12 h; when
-- neither is, the script fails before it writes: never a wrong period.
-- Returns the day key, the month key, the day and the month.
local function period_keys(k, a, now)
  local day, month = periods(now)
  local dk, mk
  if ARGV[a] == day then dk = KEYS[k] elseif ARGV[a + 1] == day then dk = KEYS[k + 1] end
  if ARGV[a + 2] == month then mk = KEYS[k + 2] elseif ARGV[a + 3] == month then mk = KEYS[k + 3] end
  if not dk or not mk then
    error('budgets: the client clock is over 12 h from the script clock')
  end
  return dk, mk, day, month
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

-- Reclaim holds whose expiry (script time) has passed: a dead worker's
-- reservation stops counting against the budget. ZREM inside the script makes
-- each one reclaimed exactly once. Bounded per call; leftovers wait for the next.
-- The charge record is left as it is (its key is not in KEYS): a record that says
-- "reserved" without a hold behind it (see live_hold) is an expired charge.
local function reclaim(held, holds, now)
  local expired = redis.call('ZRANGEBYSCORE', holds, '-inf', int(now), 'LIMIT', 0, 500)
  for _, charge_id in ipairs(expired) do
    drop_hold(held, holds, charge_id)
  end
  if #expired > 0 then
    redis.call('HINCRBY', held, '=reclaimed', #expired)
  end
  return #expired
end

-- Whether a charge still has its hold (false once released, settled or reclaimed).
local function live_hold(held, charge_id)
  return redis.call('HEXISTS', held, charge_id) == 1
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

