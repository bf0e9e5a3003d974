-- inspect.lua: the operators' view of breakers, cooldowns and exhausted marks (no writes).
--
-- KEYS[1] cooldown index   KEYS[2] exhausted index
-- KEYS[3 ..]               per scope: breaker hash, window hash, probe zset
-- KEYS[#KEYS]              gone index
-- ARGV[1]                  clock (clock.lua)
-- ARGV[1+i]                per scope: window ms
--
-- Returns { now_ms, {member, end_ms, ...} cooldowns, {account, end_ms, ...} exhausted,
--           {state, remaining_ms, opened_at_ms, calls, failures, "holder,holder",
--            opened_calls, opened_failures, ...},
--           {member, end_ms, ...} gone marks (each also among the cooldowns) }
-- remaining_ms is -1 while pinned open. opened_calls and opened_failures are the window
-- that opened the breaker (0, 0 when closed, or opened by an operator).

local now = now_ms()

local function live(index)
  local out = {}
  local rows = redis.call('ZRANGEBYSCORE', index, '(' .. now, '+inf', 'WITHSCORES')
  for i = 1, #rows, 2 do
    out[#out + 1] = rows[i]
    out[#out + 1] = tonumber(rows[i + 1])
  end
  return out
end

-- The viewer runs this script by its SHA with keys and arguments of its own choosing:
-- each scope costs three bounded reads whatever the keys hold (a window hash named a
-- thousand times is not read whole a thousand times), and one call reads at most
-- MAX_SCOPES scopes.
local MAX_SCOPES = 10000
local PROBE_HOLDERS = 100
local n = #ARGV - 1
if n > MAX_SCOPES or #KEYS ~= 3 * n + 3 then
  return redis.error_reply('ERR inspect: at most ' .. MAX_SCOPES ..
    ' scopes, three keys each and four more')
end

-- Calls and failures in the window's current buckets: one HMGET of their fields.
local function window_now(wkey, window_ms)
  local current = bucket(window_ms, now)
  local names = {}
  for b = current - BUCKETS + 1, current do
    names[#names + 1] = 'c' .. b
    names[#names + 1] = 'f' .. b
  end
  local got = redis.call('HMGET', wkey, unpack(names))
  local calls, fails = 0, 0
  for j = 1, #got, 2 do
    calls = calls + (tonumber(got[j]) or 0)
    fails = fails + (tonumber(got[j + 1]) or 0)
  end
  return calls, fails
end

local scopes = {}
for i = 1, n do
  local bkey, wkey, pkey = KEYS[3 * i], KEYS[3 * i + 1], KEYS[3 * i + 2]
  local h = redis.call('HMGET', bkey, 'state', 'until_ms', 'pinned', 'opened_at_ms',
    'opened_calls', 'opened_failures')
  local state, remaining = phase(h[1], h[2], h[3], now)
  local opened, by_calls, by_fails = 0, 0, 0
  if h[1] == 'open' then
    opened, by_calls, by_fails = tonumber(h[4]) or 0, tonumber(h[5]) or 0, tonumber(h[6]) or 0
  end
  local calls, fails = window_now(wkey, tonumber(ARGV[1 + i]))
  local holders = redis.call('ZRANGEBYSCORE', pkey, '(' .. now, '+inf', 'LIMIT', 0,
    PROBE_HOLDERS)
  local row = {state, remaining, opened, calls, fails, table.concat(holders, ','), by_calls,
    by_fails}
  for _, v in ipairs(row) do
    scopes[#scopes + 1] = v
  end
end
return {now, live(KEYS[1]), live(KEYS[2]), scopes, live(KEYS[#KEYS])}
