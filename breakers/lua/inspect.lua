-- inspect.lua: the operators' view of breakers, cooldowns and exhausted marks (no writes).
--
-- KEYS[1] cooldown index   KEYS[2] exhausted index
-- KEYS[3 ..]               per scope: breaker hash, window hash, probe zset
-- ARGV[i]                  per scope: window ms
--
-- Returns { now_ms, {member, end_ms, ...} cooldowns, {account, end_ms, ...} exhausted,
--           {state, remaining_ms, opened_at_ms, calls, failures, "holder,holder", ...} }
-- remaining_ms is -1 while pinned open. Window buckets are 1/10 of the window.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function live(index)
  local out = {}
  local rows = redis.call('ZRANGEBYSCORE', index, '(' .. now, '+inf', 'WITHSCORES')
  for i = 1, #rows, 2 do
    out[#out + 1] = rows[i]
    out[#out + 1] = tonumber(rows[i + 1])
  end
  return out
end

local scopes = {}
for i = 1, #ARGV do
  local bkey, wkey, pkey = KEYS[3 * i], KEYS[3 * i + 1], KEYS[3 * i + 2]
  local h = redis.call('HMGET', bkey, 'state', 'until_ms', 'pinned', 'opened_at_ms')
  local state, remaining, opened = 'closed', 0, 0
  if h[1] == 'open' then
    opened = tonumber(h[4]) or 0
    local until_ms = tonumber(h[2]) or 0
    if h[3] == '1' then state, remaining = 'open', -1
    elseif now < until_ms then state, remaining = 'open', until_ms - now
    else state = 'half_open' end
  end
  local width = math.ceil(tonumber(ARGV[i]) / 10)
  local current = math.floor(now / width)
  local calls, fails = 0, 0
  local flat = redis.call('HGETALL', wkey)
  for j = 1, #flat, 2 do
    if tonumber(string.sub(flat[j], 2)) > current - 10 then
      if string.sub(flat[j], 1, 1) == 'c' then calls = calls + tonumber(flat[j + 1])
      else fails = fails + tonumber(flat[j + 1]) end
    end
  end
  local holders = redis.call('ZRANGEBYSCORE', pkey, '(' .. now, '+inf')
  for _, v in ipairs({state, remaining, opened, calls, fails, table.concat(holders, ',')}) do
    scopes[#scopes + 1] = v
  end
end
return {now, live(KEYS[1]), live(KEYS[2]), scopes}
