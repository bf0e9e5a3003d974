-- check.lua: everything the chain needs before a turn, read in one round trip (no writes).
--
-- KEYS[1]                       kill switch hash
-- KEYS[2 .. 1+2S]               per scope: breaker hash, probe zset
-- KEYS[2+2S], KEYS[3+2S]        cooldown index, exhausted index (zsets: member -> end, ms)
-- KEYS[4+2S]                    the store's epoch hash
-- ARGV[1]                       clock (clock.lua)
-- ARGV[2], ARGV[3], ARGV[4]     S (scopes), P (pairs), A (accounts)
-- ARGV[4+i]                     probes allowed in half-open for scope i
-- ARGV[5+S .. 4+S+P]            per pair: "<account>|<model>"
-- ARGV[5+S+P .. 4+S+P+A]        per account
--
-- The indexes hold every mark's end (record.lua writes each with its key), so one ZMSCORE
-- per kind reads them all.
--
-- Returns a flat array:
--   who, why, since_ms                         ("" "" 0 when the kill switch is off)
--   per scope: state, remaining_ms, probe_free ("closed"|"open"|"half_open";
--              remaining_ms = -1 while pinned open by an operator; probe_free 0/1)
--   per pair: cooldown ms left (0 = none); per account: exhausted mark ms left (0 = none)
--   epoch id, and who turned the kill switch off in this epoch ("" "" for none)

local now = now_ms()
local scopes, pairs_n, accounts = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])

local out = {}
local kill = redis.call('HMGET', KEYS[1], 'who', 'why', 'since_ms')
if kill[1] then
  out[1], out[2], out[3] = kill[1], kill[2] or '', tonumber(kill[3]) or 0
else
  out[1], out[2], out[3] = '', '', 0
end

for i = 1, scopes do
  local bkey, pkey = KEYS[2 * i], KEYS[2 * i + 1]
  local h = redis.call('HMGET', bkey, 'state', 'until_ms', 'pinned')
  local state, remaining = phase(h[1], h[2], h[3], now)
  local free = 0
  if state == 'half_open' then
    local taken = redis.call('ZCOUNT', pkey, '(' .. now, '+inf')
    if taken < tonumber(ARGV[4 + i]) then free = 1 end
  end
  out[#out + 1] = state
  out[#out + 1] = remaining
  out[#out + 1] = free
end

local base = 2 + 2 * scopes
local function ends(index, from, n)
  if n == 0 then return end
  local scores = redis.call('ZMSCORE', index, unpack(ARGV, from, from + n - 1))
  for i = 1, n do
    local left = (tonumber(scores[i]) or 0) - now
    if left < 0 then left = 0 end
    out[#out + 1] = left
  end
end
ends(KEYS[base], 5 + scopes, pairs_n)
ends(KEYS[base + 1], 5 + scopes + pairs_n, accounts)

local epoch = redis.call('HMGET', KEYS[#KEYS], 'id', 'off_by')
out[#out + 1] = epoch[1] or ''
out[#out + 1] = epoch[2] or ''
return out
