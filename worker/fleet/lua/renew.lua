-- renew.lua: a worker process's heartbeat holds the leases of the turns it still runs.
--
-- KEYS[1..8]  as lib.lua          KEYS[9]  leases zset ("<tenant>|<turn>" -> expiry ms)
-- ARGV[1]  clock (clock.lua)      ARGV[2]  ms each lease holds from now
-- ARGV[3..] "<tenant>|<turn>" of its running turns
--
-- Returns {held, damaged}: how many it held (a lease that ran out meanwhile, given back
-- or its holder silent too long, stays out: XX), and "<key>|<type>" per key of the wrong
-- type set aside first (lib.lua's set_aside_damaged; its counts are dispatch.lua's to
-- recount).

local damaged = set_aside_damaged({[9] = 'zset'})
local expiry = now_ms() + tonumber(ARGV[2])
local held = 0
for i = 3, #ARGV do
  held = held + redis.call('ZADD', KEYS[9], 'XX', 'CH', expiry, ARGV[i])
end
return {held, damaged}
