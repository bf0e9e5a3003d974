-- lib.lua: helpers prepended to every fair-dispatch script, after clock.lua (not a script
-- on its own).
--
-- Every script starts with the same KEYS, all under the namespace's hash tag {N}:
--   KEYS[1] pending  zset (score 0)  "<tenant>|<seq>" in lexical order: each tenant's turns, oldest first
--   KEYS[2] msgs     hash  "<tenant>|<seq>" -> "turn|enqueued ms|deadline ms|input tokens|message"
--   KEYS[3] index    hash  turn id -> "<tenant>|<seq>" (queued turns only)
--   KEYS[4] ready    zset  tenant -> virtual time (turns served / weight): tenants with turns to dispatch
--   KEYS[5] parked   zset  tenant -> ms it is looked at again: tenants a limit holds back
--   KEYS[6] vtime    hash  tenant -> virtual time, while it is in neither ready nor parked
--   KEYS[7] clock    string  the virtual clock: the virtual time of the last turn dispatched
--   KEYS[8] queued   hash  tenant -> turns queued
-- Its own KEYS start at KEYS[9]; its own ARGV at ARGV[2] (ARGV[1] is the clock).
--
-- The layout is the one release 0.1.0 reads and writes: during a rolling upgrade both
-- releases' scripts run on these keys at once (tests/test_fair_mixed.py). A tenant with
-- turns queued is in ready or parked, and one with none queued is in neither (or, for a
-- moment, still in ready); enqueue.lua relies on it.

local PENDING, MSGS, INDEX, READY, PARKED, VTIME, CLOCK, QUEUED =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]

-- A stored number; 0 when there is none or it is not one (nan, inf, a hand edit).
local function num(v)
  local n = v and tonumber(v)
  if n and n == n and n > -1e300 and n < 1e300 then
    return n
  end
  return 0
end

-- A share's bounds, as budgets/shares.py checks them when an operator sets one.
local MAX_LIMIT, MAX_WEIGHT = 1e12, 1000

-- A stored number, or nil when it is none (or not finite: nan, inf).
local function finite(s)
  local n = s and tonumber(s)
  if n and n == n and n > -1e15 and n < 1e15 then return n end
  return nil
end

-- A share as stored, or nil when it is not four fields of whole numbers in range (a
-- hand edit, another tool): '' is no limit, a weight left out is 1.
local function parse_share(raw)
  local f = {string.match(raw, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)$')}
  if not f[1] then return nil end
  local out = {}
  for i = 1, 4 do
    local s = f[i]
    if s ~= '' then
      if #s > 13 or not string.match(s, '^%d+$') then return nil end
      local n = tonumber(s)
      if n < 1 or n > (i == 4 and MAX_WEIGHT or MAX_LIMIT) then return nil end
      out[i] = n
    end
  end
  return out
end

-- A virtual time, or nil when it is out of range: past 1e12 a tenant's step (1 / weight)
-- is lost to rounding, and every tenant ties (the lowest name takes every turn), and
-- -inf or a large negative one (a hand edit) would take every turn ahead of the others.
local MAX_VTIME = 1e12
local function vtime(v)
  local n = v and tonumber(v)
  if n and n > -MAX_VTIME and n < MAX_VTIME then return n end
  return nil
end

-- The virtual clock as stored; 0 when it is out of range.
local function clock_now()
  return vtime(redis.call('GET', CLOCK)) or 0
end

local function int(n)
  return string.format('%d', n)
end

-- The tenant has turns again: it starts at the virtual clock, or where it was if ahead
-- (going idle for a moment earns nothing).
local function activate(tenant, clock)
  local v = math.max(vtime(redis.call('HGET', VTIME, tenant)) or 0, clock)
  redis.call('ZADD', READY, v, tenant)
  redis.call('HDEL', VTIME, tenant)
end

-- Wake one idle dispatcher (it blocks on the list with BLPOP). One token at most: a
-- dispatcher woken runs rounds until one finds nothing more to move, so a burst of
-- enqueues needs one round trip, not one each.
local function wake(key)
  -- Not a list (a hand edit): no token, rather than fail every enqueue and every lease
  -- given back; the dispatchers look every interval anyway, and replace the key.
  local ok, n = pcall(redis.call, 'LLEN', key)
  if ok and n == 0 then
    redis.call('LPUSH', key, '1')
  end
end

-- Keys of the wrong type (a hand edit, another tool) would fail the script at the first
-- command on them, for every tenant, with whatever it wrote before left half done: each
-- one is looked at first, and one of another type than `want` (KEYS index -> type) is
-- deleted, so that the script goes on as if it were absent. Returns "<key>|<type>" per
-- key set aside (the caller logs and counts them), and the set of indexes deleted.
local function set_aside_damaged(want)
  local damaged, gone = {}, {}
  for i, kind in pairs(want) do
    local found = redis.call('TYPE', KEYS[i])['ok']
    if found ~= 'none' and found ~= kind then
      redis.call('DEL', KEYS[i])
      damaged[#damaged + 1] = KEYS[i] .. '|' .. found
      gone[i] = true
    end
  end
  return damaged, gone
end

-- Each key of lib.lua's, with its type.
local COMMON_TYPES = {'zset', 'hash', 'hash', 'zset', 'zset', 'hash', 'string', 'hash'}

-- After set_aside_damaged: the leases gone (KEYS[leases]), their counts (KEYS[counts])
-- go too; the counts gone alone are counted again from the leases.
local function recount_leases(gone, leases, counts)
  if gone[leases] then
    redis.call('DEL', KEYS[counts])
  elseif gone[counts] then
    local per = {}
    for _, m in ipairs(redis.call('ZRANGE', KEYS[leases], 0, -1)) do
      local tenant = string.match(m, '^([^|]*)|')
      if tenant then per[tenant] = (per[tenant] or 0) + 1 end
    end
    for tenant, n in pairs(per) do
      redis.call('HSET', KEYS[counts], tenant, n)
    end
  end
end
