-- record.lua: apply a batch of call outcomes, cooldowns and exhausted marks atomically.
--
-- KEYS[1], KEYS[2], KEYS[3]     scope index, cooldown index, exhausted index (zsets)
-- KEYS[4 .. 3+3O]               per outcome: breaker hash, window hash, probe zset
-- then C cooldown strings, then E exhausted strings (each holds its end, ms), then the
-- gone index (zset)
-- ARGV[1]                       clock (clock.lua)
-- ARGV[2..6]                    O, C, E, jitter draw (0..1e6), index TTL (ms)
-- then per outcome (11 each):   scope, verdict ("s"|"f"|"n"), holder ("" = none),
--                               window_ms, min_calls, rate_ppm, streak_max, break_ms,
--                               max_break_ms, jitter_ppm, state_ttl_ms
-- then per cooldown (2 each):   "<account>|<model>", ms
-- then per exhausted (2 each):  account, ms
-- last:                         G: the last G cooldowns are gone marks (the provider does
--                               not know the model), also kept in the gone index
--
-- Returns per outcome: transition ("" | "opened" | "reopened" | "closed"), new break ms.
-- A transition happens inside this script, so exactly one caller in the fleet receives it.
-- Closed: SUCCESS and FAILURE count in the window (10 buckets), NEUTRAL counts nothing.
-- Open: everything is ignored. Half-open: only a live probe holder's result counts;
-- its NEUTRAL frees its slot.

local now = now_ms()
local n_out, n_cool, n_exh = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local draw, index_ttl = tonumber(ARGV[5]), tonumber(ARGV[6])

-- `calls` and `fails` are the window that opened it (the probe's 1/1 on a reopen): the
-- window itself is emptied, and an operator asks why it is open.
local function open(bkey, wkey, pkey, break_ms, shown_ms, ttl, calls, fails)
  redis.call('HSET', bkey, 'state', 'open', 'opened_at_ms', now, 'until_ms', now + shown_ms,
    'break_ms', break_ms, 'streak', 0, 'opened_calls', calls, 'opened_failures', fails)
  redis.call('HDEL', bkey, 'pinned')
  redis.call('PEXPIRE', bkey, ttl)
  redis.call('DEL', wkey, pkey)
end

-- Counts one call; returns whether the breaker trips, whether the call opened a new
-- bucket (its first: only then are the window's TTL and the scope index written, since a
-- later call in the same bucket would change neither beyond a bucket's width), and the
-- window's calls and failures after a failure (0, 0 after a success).
local function count(bkey, wkey, verdict, a, streak_was)
  local window_ms, min_calls, rate_ppm, streak_max, ttl = a[1], a[2], a[3], a[4], a[8]
  local current, width = bucket(window_ms, now)
  local fresh = redis.call('HINCRBY', wkey, 'c' .. current, 1) == 1
  if verdict == 'f' then redis.call('HINCRBY', wkey, 'f' .. current, 1) end
  if fresh then redis.call('PEXPIRE', wkey, window_ms + width) end
  if verdict == 's' then
    -- A streak that is already none needs no write: the healthy case, most of the time.
    if streak_was and streak_was ~= '0' then
      redis.call('HSET', bkey, 'streak', 0)
      redis.call('PEXPIRE', bkey, ttl)
    end
    return false, fresh, 0, 0
  end
  local streak = redis.call('HINCRBY', bkey, 'streak', 1)
  redis.call('PEXPIRE', bkey, ttl)
  local calls, fails, stale = window_counts(wkey, window_ms, now)
  if #stale > 0 then redis.call('HDEL', wkey, unpack(stale)) end
  return streak >= streak_max or (calls >= min_calls and fails * 1000000 >= rate_ppm * calls),
    fresh, calls, fails
end

local out = {}
local indexed = false
for i = 1, n_out do
  local bkey, wkey, pkey = KEYS[3 * i + 1], KEYS[3 * i + 2], KEYS[3 * i + 3]
  local at = 6 + (i - 1) * 11
  local scope, verdict, holder = ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
  local a = {}
  for j = 1, 8 do a[j] = tonumber(ARGV[at + 3 + j]) end
  local kind, shown, seen = '', 0, verdict ~= 'n'
  local h = redis.call('HMGET', bkey, 'state', 'until_ms', 'pinned', 'break_ms', 'streak')
  local state = phase(h[1], h[2], h[3], now)

  if state == 'closed' then
    if verdict ~= 'n' then
      local trips, fresh, calls, fails = count(bkey, wkey, verdict, a, h[5])
      seen = fresh
      if trips then
        open(bkey, wkey, pkey, a[5], a[5], a[8], calls, fails)
        kind, shown = 'opened', a[5]
      end
    end
  elseif state == 'half_open' and holder ~= '' then
    local slot = redis.call('ZSCORE', pkey, holder)
    if slot and tonumber(slot) > now then
      if verdict == 's' then
        redis.call('DEL', bkey, wkey, pkey)
        kind = 'closed'
      elseif verdict == 'f' then
        local grown = math.min(a[6], (tonumber(h[4]) or a[5]) * 2)
        shown = grown - math.floor(grown * (a[7] / 1000000) * (draw / 1000000))
        open(bkey, wkey, pkey, grown, shown, a[8], 1, 1)
        kind = 'reopened'
      else
        redis.call('ZREM', pkey, holder)
      end
    end
  end
  out[#out + 1] = kind
  out[#out + 1] = shown
  if seen or kind ~= '' then
    redis.call('ZADD', KEYS[1], now, scope)
    indexed = true
  end
end
if indexed then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - index_ttl)
  redis.call('PEXPIRE', KEYS[1], index_ttl)
end

-- Drop ended marks from an index, which outlives the longest one left (check.lua reads
-- the marks from their index).
local function trim(index)
  redis.call('ZREMRANGEBYSCORE', index, '-inf', now)
  local last = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
  local ttl = index_ttl
  if #last == 2 then ttl = math.max(ttl, tonumber(last[2]) - now) end
  redis.call('PEXPIRE', index, ttl)
end

-- A mark only ever grows: a shorter cooldown never shortens the one in place.
local function mark(key, index, member, ms)
  if (tonumber(redis.call('GET', key)) or 0) < now + ms then
    redis.call('SET', key, now + ms, 'PX', ms)
    redis.call('ZADD', index, now + ms, member)
  end
  trim(index)
end

local gone_index, n_gone = KEYS[#KEYS], tonumber(ARGV[#ARGV])
local key_at, arg_at = 3 * n_out + 4, 6 + n_out * 11
for i = 0, n_cool - 1 do
  local member, ms = ARGV[arg_at + 2 * i + 1], tonumber(ARGV[arg_at + 2 * i + 2])
  mark(KEYS[key_at + i], KEYS[2], member, ms)
  if i >= n_cool - n_gone then
    if (tonumber(redis.call('ZSCORE', gone_index, member)) or 0) < now + ms then
      redis.call('ZADD', gone_index, now + ms, member)
    end
    trim(gone_index)
  end
end
key_at, arg_at = key_at + n_cool, arg_at + 2 * n_cool
for i = 0, n_exh - 1 do
  mark(KEYS[key_at + i], KEYS[3], ARGV[arg_at + 2 * i + 1], tonumber(ARGV[arg_at + 2 * i + 2]))
end
return out
