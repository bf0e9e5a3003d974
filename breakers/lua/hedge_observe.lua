-- hedge_observe.lua: one attempt's first-byte latency, and the hedge budget's refill.
--
-- KEYS[1]  latency histogram of one (account, model) in one window (hash: bucket -> count)
-- KEYS[2]  the hedge budget (hash: milli -> thousandths of a hedge)
-- ARGV[1]  clock (unused)  ARGV[2]  bucket index, "" for none  ARGV[3]  histogram TTL (ms)
-- ARGV[4]  thousandths of a hedge this attempt earns (0 for a hedge)  ARGV[5]  budget TTL (ms)

if ARGV[2] ~= '' then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
local earned = tonumber(ARGV[4])
if earned > 0 then
  redis.call('HINCRBY', KEYS[2], 'milli', earned)
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
end
return 1
