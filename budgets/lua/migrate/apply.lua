-- apply.lua: write one claimed key under its new name, once per claim.
--
-- KEYS[1] the new key   KEYS[2] the tenant's hash of claims already applied
-- ARGV[1] the claim's name   ARGV[2] how long KEYS[2] keeps it (ms)
-- ARGV[3] "merge" (day and month counters) or "keep"   ARGV[4] "hash" or "zset"
-- ARGV[5] the claim's PTTL (ms; -1 none)   ARGV[6..] field, value (zset: member, score)
--
-- Applied claims are recorded beside the new key, in the same slot and the same script:
-- a run that stopped after writing and before releasing its claim, resumed, writes
-- nothing twice. Returns "moved", "merged", "kept" or "done" (applied before).

local merge = ARGV[3] == 'merge'
if merge then
  for i = 7, #ARGV, 2 do
    if not string.match(ARGV[i], '^-?%d+$') then
      return redis.error_reply('not a counter: ' .. ARGV[i - 1])
    end
  end
end
if redis.call('HSETNX', KEYS[2], ARGV[1], '1') == 0 then return 'done' end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
if redis.call('EXISTS', KEYS[1]) == 1 then
  if not merge then return 'kept' end
  for i = 6, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
  return 'merged'
end
for i = 6, #ARGV, 2 do
  if ARGV[4] == 'zset' then
    redis.call('ZADD', KEYS[1], ARGV[i + 1], ARGV[i])
  else
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
local ttl = tonumber(ARGV[5])
if ttl >= 0 then redis.call('PEXPIRE', KEYS[1], math.max(ttl, 1)) end
return 'moved'
