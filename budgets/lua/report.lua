-- report.lua: one consistent snapshot of a tenant's budget for operators.
--
-- KEYS[1..7] and ARGV[1..8]: every script's (lib.lua)
-- KEYS[8] limits hash
-- ARGV[10] "1": the period hashes whole, with their spend attribution ("by:" fields);
--          else (or absent) without them, which may be many
--
-- Returns {now_ms, day, month, configured limits {daily, monthly, fallback_cap,
--          overdraft} (false when absent), held {total, fallback, reclaimed so far, worst},
--          day hash (flat field/value list), month hash (flat), reclaimed now}

local now, dk, mk, day, month, reclaimed = begin()

local function period(key)
  local flat = redis.call('HGETALL', key)
  if ARGV[10] == '1' then
    return flat
  end
  local kept = {}
  for i = 1, #flat, 2 do
    if string.sub(flat[i], 1, 3) ~= 'by:' then
      kept[#kept + 1] = flat[i]
      kept[#kept + 1] = flat[i + 1]
    end
  end
  return kept
end

local lim = redis.call('HMGET', KEYS[8], 'daily', 'monthly', 'fallback_cap', 'overdraft')
local held = redis.call('HMGET', HELD, '=total', '=fallback', '=reclaimed', '=worst')
return {now, day, month, lim, {num(held[1]), num(held[2]), num(held[3]), num(held[4])},
  period(dk), period(mk), reclaimed}
