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

-- Every script starts with the same KEYS and ARGV (after the clock, ARGV[1]):
--   KEYS[1] held hash   KEYS[2] holds zset (score: expiry ms)   KEYS[3] reclaimed hash
--   KEYS[4..7] day and month candidates (period_keys)
--   ARGV[2..5] the candidates' periods   ARGV[6] day key ttl ms   ARGV[7] month key ttl ms
--   ARGV[8] charge record ttl ms
-- Its own KEYS start at KEYS[8], its own ARGV at ARGV[9].
local HELD, HOLDS, RECLAIMED = KEYS[1], KEYS[2], KEYS[3]

-- A hold is stored in the held hash as "<micros>|<fallback 0/1>|<worst micros>|<provider>|<labels>".
-- The labels come last and may hold '|' (budgets/attribution.py): `n` parts at most, the
-- last one the rest of the value.
local function fields(v, n)
  local parts, at = {}, 1
  while #parts < n - 1 do
    local bar = string.find(v, '|', at, true)
    if not bar then break end
    parts[#parts + 1] = string.sub(v, at, bar - 1)
    at = bar + 1
  end
  parts[#parts + 1] = string.sub(v, at)
  return parts
end

-- (Holds written before worst cases were kept have two fields: the worst is the hold.)
local function parse_hold(v)
  local parts = fields(v, 5)
  local micros = tonumber(parts[1])
  return micros, parts[2], tonumber(parts[3]) or micros, parts[4] or '', parts[5] or ''
end

-- Returns whether the field held nothing before (an addition to an empty field).
local function bump(key, field, amount)
  if amount >= 0 then
    return redis.call('HINCRBY', key, field, int(amount)) == amount
  end
  -- A correction downwards never takes a period below zero.
  local now = num(redis.call('HGET', key, field))
  redis.call('HSET', key, field, int(math.max(0, now + amount)))
  return false
end

-- Spend attribution: the labels a charge carries, as the client encoded them
-- (budgets/attribution.py): "<most values>" then "<key>" "<value>" pairs, each part ended
-- by \31 (no key or value holds a control character). A key counts its values in the
-- period hash as "by:<key>=<value>", a turn without the key as "by:<key>!none", the
-- values past the most a key keeps per period as "by:<key>!other", and how many values
-- it keeps as "by:<key>#". Every value field starts with "by:", so no label writes
-- "spent" or any other field; a key holds no '=', '!' or '#', so no value passes for
-- another key's or for a count.
local function attribute(key, labels, amount)
  if labels == '' or amount == 0 then
    return
  end
  local parts = {}
  for part in string.gmatch(labels, '([^\31]*)\31') do
    parts[#parts + 1] = part
  end
  local most = tonumber(parts[1]) or 0
  for i = 2, #parts - 1, 2 do
    local name, value = parts[i], parts[i + 1]
    local field
    if value == '' then
      field = 'by:' .. name .. '!none'
    else
      field = 'by:' .. name .. '=' .. value
      if redis.call('HEXISTS', key, field) == 0 then
        local count = 'by:' .. name .. '#'
        if num(redis.call('HGET', key, count)) < most then
          redis.call('HINCRBY', key, count, 1)
        else
          field = 'by:' .. name .. '!other'
        end
      end
    end
    redis.call('HINCRBY', key, field, int(amount))
  end
end

-- Add `amount` (negative for a correction) to the spend of the day and the month, and to
-- its labels' values: each by what "spent" changed, so a key's values always sum to it. A
-- period's TTL is set when its spend starts (it outlives the period; refreshing it on
-- every charge would change nothing), and on a correction.
local function add_spend(dk, mk, amount, fallback, provider, labels)
  for _, spec in ipairs({{dk, ARGV[6]}, {mk, ARGV[7]}}) do
    local key = spec[1]
    local fresh, before
    if amount >= 0 then
      fresh = bump(key, 'spent', amount)
      attribute(key, labels or '', amount)
    else
      -- A correction downwards never takes a period below zero: the labels lose what
      -- "spent" lost.
      before = num(redis.call('HGET', key, 'spent'))
      fresh = bump(key, 'spent', amount)
      attribute(key, labels or '', math.max(0, before + amount) - before)
    end
    if fallback == '1' then
      bump(key, 'fallback', amount)
      if provider ~= '' then
        bump(key, 'fb:' .. provider, amount)
      end
    end
    if fresh or amount < 0 then
      redis.call('PEXPIRE', key, spec[2])
    end
  end
end

-- Drop one hold and its share of the running totals. Returns its micros (0 when there
-- was none), fallback flag, worst case, provider and labels.
local function drop_hold(charge_id)
  local v = redis.call('HGET', HELD, charge_id)
  redis.call('ZREM', HOLDS, charge_id)
  if not v then
    return 0, '0', 0, '', ''
  end
  local micros, fallback, worst, provider, labels = parse_hold(v)
  redis.call('HDEL', HELD, charge_id)
  redis.call('HINCRBY', HELD, '=total', int(-micros))
  redis.call('HINCRBY', HELD, '=worst', int(-worst))
  if fallback == '1' then
    redis.call('HINCRBY', HELD, '=fallback', int(-micros))
    redis.call('HINCRBY', HELD, '=fallback_worst', int(-worst))
  end
  return micros, fallback, worst, provider, labels
end

-- Reclaim holds whose expiry (script time) has passed. The worker that held one died or
-- lost Redis after reserving, and its call may have reached the provider, who bills it:
-- the hold is charged at what it reserved, and remembered in the reclaimed hash so that a
-- settlement or release that arrives later corrects it instead of charging twice. ZREM
-- inside the script makes each one reclaimed exactly once. Bounded per call; leftovers
-- keep counting as holds until the next. The charge record (not in KEYS) still says
-- "reserved": without a live hold behind it (live_hold), that is a reclaimed charge.
local function reclaim(now, dk, mk)
  local expired = redis.call('ZRANGEBYSCORE', HOLDS, '-inf', int(now), 'LIMIT', 0, 500)
  for _, charge_id in ipairs(expired) do
    local micros, fallback, _, provider, labels = drop_hold(charge_id)
    add_spend(dk, mk, micros, fallback, provider, labels)
    for _, key in ipairs({dk, mk}) do
      redis.call('HINCRBY', key, 'reclaimed', 1)
      redis.call('HINCRBY', key, 'reclaimed_micros', int(micros))
    end
    redis.call('HSET', RECLAIMED, charge_id,
      int(micros) .. '|' .. fallback .. '|' .. provider .. '|' .. labels)
  end
  if #expired > 0 then
    redis.call('HINCRBY', HELD, '=reclaimed', #expired)
    redis.call('PEXPIRE', RECLAIMED, ARGV[8])
  end
  return #expired
end

-- What reclaiming `charge_id` charged (micros, fallback flag, provider, labels), forgotten
-- now that its caller reports back; 0 when it was not reclaimed.
local function unreclaim(charge_id)
  local v = redis.call('HGET', RECLAIMED, charge_id)
  if not v then
    return 0, '0', '', ''
  end
  redis.call('HDEL', RECLAIMED, charge_id)
  local parts = fields(v, 4)
  return tonumber(parts[1]), parts[2], parts[3] or '', parts[4] or ''
end

-- The start of every script: the clock, this period's keys, and expired holds reclaimed.
local function begin()
  local now = now_ms()
  local dk, mk, day, month = period_keys(4, 2, now)
  return now, dk, mk, day, month, reclaim(now, dk, mk)
end

-- Whether a charge still has its hold (false once released, settled or reclaimed).
local function live_hold(charge_id)
  return redis.call('HEXISTS', HELD, charge_id) == 1
end

-- Keep the held hash and the expiry set alive until their last hold has
-- expired, plus a grace; both share one deadline so neither outlives the other.
local function refresh_hold_ttl(now, grace_ms)
  local last = redis.call('ZRANGE', HOLDS, -1, -1, 'WITHSCORES')
  local until_ms = now
  if #last == 2 then
    until_ms = math.max(now, tonumber(last[2]))
  end
  local ttl = until_ms - now + grace_ms
  redis.call('PEXPIRE', HELD, int(ttl))
  if #last == 2 then
    redis.call('PEXPIRE', HOLDS, int(ttl))
  end
end
