-- clock.lua: prepended to every script of breakers and budgets (not a script on its own).
--
-- ARGV[1] of every script is the clock: epoch milliseconds that a test passes
-- (`breakers.rediskit.ManualClock`), or "" for the Redis server's TIME, never a
-- worker's clock. Times compared inside a script come from here; key TTLs
-- (PX, PEXPIRE) run on Redis's own time and only bound how long keys live.

local function now_ms()
  if ARGV[1] ~= '' then
    return tonumber(ARGV[1])
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
