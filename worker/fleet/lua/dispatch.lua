-- dispatch.lua: one dispatch round. Moves the next turn of the least-served tenant whose
-- limits allow it into the broker's queue, again and again, while that queue is shorter
-- than the depth asked for.
--
-- KEYS[1..8]  as lib.lua
-- KEYS[9]  leases zset  "<tenant>|<turn>" -> lease expiry ms
-- KEYS[10] inflight hash  tenant -> leases held
-- KEYS[11] buckets hash  tenant -> "turn tokens|input tokens|ms"
-- KEYS[12] expired hash  turn id -> "<tenant>|<ms waited>": past their queue deadline,
--          waiting for the dispatcher to write their result
-- KEYS[13] shares hash  tenant -> "max_in_flight|turns_per_minute|input_tokens_per_minute|weight"
-- KEYS[14] the turn store's sent zset (turn id -> ms sent): the sweeper's clock restarts
-- KEYS[15] the broker's queue (a list: LPUSH in, the workers BRPOP out)
-- ARGV[1]  clock (clock.lua)   ARGV[2]  most turns to move   ARGV[3]  queue depth
-- ARGV[4]  lease ms            ARGV[5]  the default share, as KEYS[13]'s values
-- ARGV[6]  '1' while the kill switch is on: every tenant is served, no limit checked and
--          no bucket paid, so that the workers reject and hold each turn at once (a lease
--          is still taken: a turn the switch let through in between counts)
--
-- Returns {moved, held, expired, next, again}: moved is "<tenant>|<ms waited>" per turn
-- moved, held is "<tenant>|<limit>" per tenant a limit parked this round, expired the
-- count of turns found past their deadline, next the ms until the first parked tenant is
-- looked at again (-1: none parked), again 1 when a round run at once would find more to
-- move (it stopped at `most` or at its looks, not for want of room or turns).

local LEASES, INFLIGHT, BUCKETS, EXPIRED, SHARES, SENT, QUEUE =
  KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15]
local now = now_ms()
local most, depth, lease_ms = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local drain = ARGV[6] == '1'

-- Leases a dead worker left run out.
for _, m in ipairs(redis.call('ZRANGEBYSCORE', LEASES, '-inf', now, 'LIMIT', 0, 100)) do
  local tenant = string.match(m, '^([^|]*)|')
  redis.call('ZREM', LEASES, m)
  if redis.call('HINCRBY', INFLIGHT, tenant, -1) <= 0 then
    redis.call('HDEL', INFLIGHT, tenant)
  end
end
-- Tenants whose wait is over (every one, while draining) are dispatched again.
local due = drain and '+inf' or now
for _, tenant in ipairs(redis.call('ZRANGEBYSCORE', PARKED, '-inf', due, 'LIMIT', 0, 100)) do
  redis.call('ZREM', PARKED, tenant)
  activate(tenant)
end

local function share(tenant)
  local raw = redis.call('HGET', SHARES, tenant) or ARGV[5]
  local a, b, c, w = string.match(raw, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  return tonumber(a), tonumber(b), tonumber(c), math.max(num(w), 1)
end

-- The tenant's buckets, refilled to now: turn tokens, input tokens.
local function buckets(tenant, tpm, itpm)
  local raw = redis.call('HGET', BUCKETS, tenant)
  local turns, tokens, at = tpm, itpm, now
  if raw then
    local a, b, c = string.match(raw, '^([^|]*)|([^|]*)|([^|]*)$')
    turns, tokens, at = tonumber(a), tonumber(b), tonumber(c)
  end
  local dt = math.max(now - at, 0)
  if tpm then turns = math.min(tpm, (turns or tpm) + dt * tpm / 60000) end
  if itpm then tokens = math.min(itpm, (tokens or itpm) + dt * itpm / 60000) end
  return turns, tokens
end

local function park(tenant, v, wake, limit, held)
  redis.call('ZREM', READY, tenant)
  redis.call('HSET', VTIME, tenant, v)
  redis.call('ZADD', PARKED, wake, tenant)
  held[#held + 1] = tenant .. '|' .. limit
end

local free = depth - redis.call('LLEN', QUEUE)
local room = math.min(most, free)
local moved, held, expired = {}, {}, 0
local looks = room + 200
while room > 0 and looks > 0 do
  looks = looks - 1
  local top = redis.call('ZRANGE', READY, 0, 0, 'WITHSCORES')
  if not top[1] then break end
  local tenant, v = top[1], tonumber(top[2])
  local member, entry = head(tenant)
  if not member then
    -- Nothing queued (an entry lost to an operator's hand): the tenant is idle.
    redis.call('ZREM', READY, tenant)
    redis.call('HSET', VTIME, tenant, v)
  else
    local turn, enqueued, deadline, need, message =
      string.match(entry, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
    enqueued, deadline, need = tonumber(enqueued), tonumber(deadline), tonumber(need)
    if deadline <= now then
      unqueue(tenant, member, turn)
      redis.call('HSET', EXPIRED, turn, tenant .. '|' .. int(now - enqueued))
      expired = expired + 1
    else
      local mif, tpm, itpm, weight = share(tenant)
      if drain then
        mif, tpm, itpm = nil, nil, nil
      end
      local turns, tokens = buckets(tenant, tpm, itpm)
      if mif and num(redis.call('HGET', INFLIGHT, tenant)) >= mif then
        -- Looked at again when one of its turns concludes (release.lua), or in a second.
        park(tenant, v, now + 1000, 'max_in_flight', held)
      elseif tpm and turns < 1 then
        park(tenant, v, now + math.ceil((1 - turns) * 60000 / tpm), 'turns_per_minute', held)
      elseif itpm and tokens < math.min(need, itpm) then
        local short = math.min(need, itpm) - tokens
        park(tenant, v, now + math.ceil(short * 60000 / itpm), 'input_tokens_per_minute', held)
      else
        unqueue(tenant, member, turn)
        redis.call('LPUSH', QUEUE, message)
        redis.call('ZADD', SENT, 'XX', now, turn)
        redis.call('ZADD', LEASES, now + lease_ms, tenant .. '|' .. turn)
        redis.call('HINCRBY', INFLIGHT, tenant, 1)
        if tpm or itpm then
          turns = turns and turns - 1 or ''
          tokens = tokens and tokens - need or ''
          redis.call('HSET', BUCKETS, tenant, turns .. '|' .. tokens .. '|' .. int(now))
        end
        -- Start-time fair queueing: the clock is the start tag of the turn served.
        redis.call('SET', CLOCK, v)
        local after = v + 1 / weight
        if redis.call('HGET', QUEUED, tenant) then
          redis.call('ZADD', READY, after, tenant)
        else
          redis.call('ZREM', READY, tenant)
          redis.call('HSET', VTIME, tenant, after)
        end
        moved[#moved + 1] = tenant .. '|' .. int(now - enqueued)
        room = room - 1
      end
    end
  end
end
local first = redis.call('ZRANGE', PARKED, 0, 0, 'WITHSCORES')[2]
local next_ms = first and int(math.max(tonumber(first) - now, 0)) or -1
local again = (room > 0 and looks == 0) or (#moved == most and free > most)
return {moved, held, expired, next_ms, again and 1 or 0}
