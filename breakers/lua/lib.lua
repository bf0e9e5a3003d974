-- lib.lua: helpers prepended to every breakers script, after clock.lua (not a script on its own).

-- A breaker as seen at `now` from its hash's state, until_ms and pinned fields:
-- 'closed', 'open' or 'half_open' (open with its break elapsed: derived, never stored),
-- and the break left in ms (-1 while pinned open by an operator, 0 unless open).
local function phase(state, until_ms, pinned, now)
  if state ~= 'open' then
    return 'closed', 0
  end
  if pinned == '1' then
    return 'open', -1
  end
  local left = (tonumber(until_ms) or 0) - now
  if left > 0 then
    return 'open', left
  end
  return 'half_open', 0
end

local BUCKETS = 10 -- a window is this many buckets, each 1/10 of it

-- The bucket `now` falls in for a window of `window_ms`, and the bucket's width in ms.
local function bucket(window_ms, now)
  local width = math.ceil(window_ms / BUCKETS)
  return math.floor(now / width), width
end

-- Calls and failures in a breaker's window hash at `now`, and the fields of buckets
-- that fell out of the window (for the caller to delete, if it writes).
local function window_counts(wkey, window_ms, now)
  local current = bucket(window_ms, now)
  local calls, fails, stale = 0, 0, {}
  local flat = redis.call('HGETALL', wkey)
  for i = 1, #flat, 2 do
    local field, count = flat[i], tonumber(flat[i + 1])
    if tonumber(string.sub(field, 2)) <= current - BUCKETS then
      stale[#stale + 1] = field
    elseif string.sub(field, 1, 1) == 'c' then
      calls = calls + count
    else
      fails = fails + count
    end
  end
  return calls, fails, stale
end
