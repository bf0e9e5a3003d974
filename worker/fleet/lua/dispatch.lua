-- dispatch.lua: one dispatch round. Gives back the leases of the turns its process saw
-- conclude, then moves the next turns of the least-served tenant whose limits allow it
-- into the broker's queue, again and again, while that queue is shorter than the depth
-- asked for.
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
-- KEYS[16] deadlines zset "<tenant>|<seq>" -> queue deadline ms (enqueue.lua's; 0.1.0's
--          enqueue writes none, and its turns are found late only when their tenant is
--          visited, as 0.1.0 does)
-- ARGV[1]  clock (clock.lua)   ARGV[2]  most turns to move   ARGV[3]  queue depth
-- ARGV[4]  lease ms            ARGV[5]  the default share, as KEYS[13]'s values
-- ARGV[6]  '1' while the kill switch is on: every tenant is served, no limit checked and
--          no bucket paid, so that the workers reject and hold each turn at once (a lease
--          is still taken: a turn the switch let through in between counts)
-- ARGV[7]  '1': let the leases a dead worker left run out (a second apart is often enough)
-- ARGV[8..] "<tenant>|<turn>" of turns concluded since the process's last round: their
--          leases are given back first, as release.lua does
--
-- Returns {moved, held, expired, next, again, unreadable, damaged, clamped}: moved is
-- "<tenant>|<ms waited>" per turn
-- moved, held is "<tenant>|<limit>" per tenant a limit parked this round, expired the
-- count of turns found past their deadline, next the ms until the first parked tenant is
-- looked at again (-1: none parked), again 1 when a round run at once would find more to
-- move (it stopped at `most` or at its looks, not for want of room or turns), and
-- unreadable the tenants whose stored share it could not read: each was served on the
-- default share (ARGV[5]), as if it had none of its own; damaged "<key>|<type>" per key of
-- the wrong type it deleted before anything else (lib.lua's set_aside_damaged: what the
-- others say is rebuilt from what is left), and clamped the count of leases whose expiry
-- lay further ahead than any holder takes (a hand edit), brought back to one lease.
--
-- The cost is per visit, not per turn: a visit takes as many of the tenant's oldest turns
-- as its limits allow before the next tenant's virtual time comes (a tenant alone: the
-- whole room), each key written once for all of them. The order is start-time fair
-- queueing's, as if each turn were a visit of its own.

local LEASES, INFLIGHT, BUCKETS, EXPIRED, SHARES, SENT, QUEUE, DEADLINES =
  KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[16]
local now = now_ms()
local most, depth, lease_ms = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local drain = ARGV[6] == '1'
-- A lease renewed runs ALIVE_S (worker/fleet/heartbeat.py) from its holder's beat, one a
-- dispatch takes `lease_ms`: one further ahead than both and this slack was not taken by a
-- holder, and would hold its tenant's place for as long as it says.
local LEASE_SLACK_MS = 15000

local want = {}
for i, kind in ipairs(COMMON_TYPES) do want[i] = kind end
for i, kind in pairs({'zset', 'hash', 'hash', 'hash', 'hash', 'zset', 'list', 'zset'}) do
  if KEYS[i + 8] then want[i + 8] = kind end
end
local damaged, gone = set_aside_damaged(want)

-- Every tenant with turns queued is counted again from its queue, and put back in ready
-- unless it is ready or parked already (where the keys that said so were deleted): a walk
-- from tenant to tenant, not turn to turn.
local function requeue_all()
  local clock = clock_now()
  local from = '-'
  for _ = 1, 100000 do
    local member = redis.call('ZRANGEBYLEX', PENDING, from, '+', 'LIMIT', 0, 1)[1]
    if not member then break end
    local tenant = string.match(member, '^(.*)|[^|]*$')
    if not tenant then
      from = '(' .. member
    else
      local n = redis.call('ZLEXCOUNT', PENDING, '[' .. tenant .. '|', '(' .. tenant .. '|\255')
      redis.call('HSET', QUEUED, tenant, n)
      if not (redis.call('ZSCORE', READY, tenant) or redis.call('ZSCORE', PARKED, tenant)) then
        activate(tenant, clock)
      end
      from = '(' .. tenant .. '|\255'
    end
  end
end

if damaged[1] then
  if gone[1] and not gone[2] then
    -- The queue's order is in its members' names: the waiting turns' entries give it back.
    local members = redis.call('HKEYS', MSGS)
    for i = 1, #members, 1000 do
      local part = {}
      for j = i, math.min(i + 999, #members) do
        part[#part + 1] = 0
        part[#part + 1] = members[j]
      end
      redis.call('ZADD', PENDING, unpack(part))
    end
  end
  if gone[1] or gone[4] or gone[5] or gone[8] then
    requeue_all()
  end
  recount_leases(gone, 9, 10)
  if gone[9] or gone[10] or gone[13] then
    -- The limits that parked tenants are read afresh: each is looked at again at once.
    for _, tenant in ipairs(redis.call('ZRANGE', PARKED, 0, -1)) do
      redis.call('ZADD', PARKED, 'XX', 0, tenant)
    end
  end
end

-- Tenants a limit parked: the first one's time says when to look again.
local first = redis.call('ZRANGE', PARKED, 0, 0, 'WITHSCORES')[2]
first = first and tonumber(first)
-- Changes to the leases each tenant holds, written once at the end of the round.
local running = {}

-- A lease given back: one of its tenant's turns may start now, if a limit parked it
-- (score 0: due at once; XX: a tenant not parked stays as it is).
local function given_back(tenant, n)
  running[tenant] = (running[tenant] or 0) - n
  if first and redis.call('ZADD', PARKED, 'XX', 'CH', 0, tenant) == 1 then
    first = 0
  end
end

-- Leases given back: counted once per lease held, whatever the list repeats.
if #ARGV > 7 then
  local given, seen = {}, {}
  for i = 8, #ARGV do
    if not seen[ARGV[i]] then
      seen[ARGV[i]] = true
      given[#given + 1] = ARGV[i]
    end
  end
  local held = redis.call('ZMSCORE', LEASES, unpack(given))
  local gone, per = {}, {}
  for i, m in ipairs(given) do
    if held[i] then
      gone[#gone + 1] = m
      -- A member not "<tenant>|<turn>" (a hand edit) is dropped, counted for no one.
      local tenant = string.match(m, '^([^|]*)|')
      if tenant then per[tenant] = (per[tenant] or 0) + 1 end
    end
  end
  if gone[1] then
    redis.call('ZREM', LEASES, unpack(gone))
    for tenant, n in pairs(per) do
      given_back(tenant, n)
    end
  end
end
-- Leases a dead worker left run out.
if ARGV[7] == '1' then
  local ran_out = {}
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', LEASES, '-inf', now, 'LIMIT', 0, 100)) do
    redis.call('ZREM', LEASES, m)
    local tenant = string.match(m, '^([^|]*)|')
    if tenant then ran_out[tenant] = true end
  end
  -- Counted again from the leases left, not down by one a lease: a lease written by hand
  -- (no turn behind it) that runs out gives back no room it never took.
  for tenant in pairs(ran_out) do
    local held = redis.call('ZLEXCOUNT', LEASES, '[' .. tenant .. '|', '(' .. tenant .. '|\255')
    if held > 0 then
      redis.call('HSET', INFLIGHT, tenant, held)
    else
      redis.call('HDEL', INFLIGHT, tenant)
    end
    running[tenant] = 0
    given_back(tenant, 0)
  end
end
-- Leases whose expiry lies further ahead than any holder takes: one lease from now, which
-- a live holder's heartbeat renews and a dead one's lets run out.
local clamped = 0
if ARGV[7] == '1' then
  local beyond = '(' .. int(now + lease_ms + LEASE_SLACK_MS)
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', LEASES, beyond, '+inf', 'LIMIT', 0, 100)) do
    redis.call('ZADD', LEASES, 'XX', now + lease_ms, m)
    clamped = clamped + 1
  end
end
-- Tenants whose wait is over (every one, while draining) are dispatched again.
local served_at = nil
if first and (drain or first <= now) then
  local clock = clock_now()
  local due = drain and '+inf' or now
  local woken = redis.call('ZRANGEBYSCORE', PARKED, '-inf', due, 'LIMIT', 0, 100)
  redis.call('ZREM', PARKED, unpack(woken))
  for _, tenant in ipairs(woken) do
    activate(tenant, clock)
  end
  first = redis.call('ZRANGE', PARKED, 0, 0, 'WITHSCORES')[2]
  first = first and tonumber(first)
end

local default_share = parse_share(ARGV[5])
-- Tenants whose share could not be read this round: served on the default share.
local unreadable, reported = {}, {}
local function share(tenant)
  local raw = redis.call('HGET', SHARES, tenant)
  local s = raw and parse_share(raw)
  if raw and not s then
    if not reported[tenant] then
      reported[tenant] = true
      unreadable[#unreadable + 1] = tenant
    end
  end
  s = s or default_share
  return s[1], s[2], s[3], s[4] or 1
end

-- The tenant's buckets, refilled to now: turn tokens, input tokens.
local function buckets(tenant, tpm, itpm)
  local raw = redis.call('HGET', BUCKETS, tenant)
  local turns, tokens, at = tpm, itpm, now
  if raw then
    local a, b, c = string.match(raw, '^([^|]*)|([^|]*)|([^|]*)$')
    -- A bucket that cannot be read is full (it only ever delays a tenant).
    turns, tokens, at = finite(a), finite(b), finite(c) or now
  end
  local dt = math.max(now - at, 0)
  if tpm then turns = math.min(tpm, (turns or tpm) + dt * tpm / 60000) end
  if itpm then
    -- A debt is at most one bucket (a turn larger than the bucket, or a bucket that a
    -- share since lowered left deeper): read under the share as it is now.
    tokens = math.max(math.min(itpm, (tokens or itpm) + dt * itpm / 60000), -itpm)
  end
  return turns, tokens
end

local moved, held, expired = {}, {}, 0

local function park(tenant, v, wake_at, limit)
  redis.call('ZREM', READY, tenant)
  redis.call('HSET', VTIME, tenant, v)
  redis.call('ZADD', PARKED, wake_at, tenant)
  held[#held + 1] = tenant .. '|' .. limit
  first = math.min(first or wake_at, wake_at)
end

-- The tenant's queued count less n; a count that is not one (a hand edit) is counted again
-- from its queue.
local function count_down(tenant, n)
  local ok, left = pcall(redis.call, 'HINCRBY', QUEUED, tenant, -n)
  if not ok or left <= 0 then
    -- A count that says nothing is left is checked against the queue: one written too
    -- low by hand would leave the tenant's turns undispatched until their deadlines.
    local real = redis.call('ZLEXCOUNT', PENDING, '[' .. tenant .. '|', '(' .. tenant .. '|\255')
    if not ok or real > 0 then
      redis.call('HSET', QUEUED, tenant, real)
      left = real
    end
  end
  return left
end

-- Takes up to `want` of the tenant's oldest turns, while its input tokens allow; those
-- past their deadline go to `expired`. Leaves the tenant ready at its new virtual time,
-- parked, or idle. Returns how many turns it moved and how many it looked at.
local function visit(tenant, v, weight, want, turns, tokens, tpm, itpm)
  local members = redis.call('ZRANGEBYLEX', PENDING, '[' .. tenant .. '|', '(' .. tenant .. '|\255', 'LIMIT', 0, want)
  if not members[1] then
    -- Nothing queued (an entry lost to an operator's hand): the tenant is idle.
    redis.call('ZREM', READY, tenant)
    redis.call('HSET', VTIME, tenant, v)
    redis.call('HDEL', QUEUED, tenant)
    return 0, 0
  end
  local entries = redis.call('HMGET', MSGS, unpack(members))
  local gone, turn_ids, out, sent, leases, late = {}, {}, {}, {}, {}, {}
  local served, tag, after, stop, stop_at = 0, v, v, nil, nil
  for i, member in ipairs(members) do
    local entry = entries[i]
    if not entry then
      gone[#gone + 1] = member
    else
      local turn, enqueued, deadline, need, message =
        string.match(entry, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
      enqueued, deadline, need = finite(enqueued), finite(deadline), finite(need)
      if not (enqueued and deadline and need and message) then
        -- An entry that cannot be read (a hand edit, another tool): set aside, its turn
        -- (if named) answered as unreadable (`waited` -1), never blocking the rest.
        gone[#gone + 1] = member
        if turn and turn ~= '' then
          turn_ids[#turn_ids + 1] = turn
          late[#late + 1] = turn
          late[#late + 1] = tenant .. '|-1'
        end
      elseif deadline <= now then
        gone[#gone + 1] = member
        turn_ids[#turn_ids + 1] = turn
        late[#late + 1] = turn
        late[#late + 1] = tenant .. '|' .. int(now - enqueued)
      elseif itpm and tokens < math.min(need, itpm) then
        local short = math.min(need, itpm) - tokens
        stop, stop_at = 'input_tokens_per_minute', now + math.ceil(short * 60000 / itpm)
        break
      else
        gone[#gone + 1] = member
        turn_ids[#turn_ids + 1] = turn
        out[#out + 1] = message
        sent[#sent + 1] = now
        sent[#sent + 1] = turn
        leases[#leases + 1] = now + lease_ms
        leases[#leases + 1] = tenant .. '|' .. turn
        moved[#moved + 1] = tenant .. '|' .. int(now - enqueued)
        if tpm then turns = turns - 1 end
        -- A turn larger than the bucket left a full one: its debt stops at one bucket,
        -- so that the tenant's next turn waits about a minute at most, not its size.
        if itpm then tokens = math.max(tokens - need, -itpm) end
        served, tag, after = served + 1, after, after + 1 / weight
      end
    end
  end
  local left = 1
  if gone[1] then
    redis.call('ZREM', PENDING, unpack(gone))
    redis.call('HDEL', MSGS, unpack(gone))
    redis.call('ZREM', DEADLINES, unpack(gone))
    if turn_ids[1] then
      redis.call('HDEL', INDEX, unpack(turn_ids))
    end
    left = count_down(tenant, #gone)
    if left <= 0 then
      redis.call('HDEL', QUEUED, tenant)
    end
  end
  if late[1] then
    redis.call('HSET', EXPIRED, unpack(late))
    expired = expired + #late / 2
  end
  if served > 0 then
    redis.call('LPUSH', QUEUE, unpack(out))
    redis.call('ZADD', SENT, 'XX', unpack(sent))
    redis.call('ZADD', LEASES, unpack(leases))
    running[tenant] = (running[tenant] or 0) + served
    if tpm or itpm then
      redis.call('HSET', BUCKETS, tenant, (turns or '') .. '|' .. (tokens or '') .. '|' .. int(now))
    end
    -- Start-time fair queueing: the clock is the start tag of the last turn served.
    served_at = tag
  end
  if stop then
    park(tenant, after, stop_at, stop)
  elseif left <= 0 then
    redis.call('ZREM', READY, tenant)
    redis.call('HSET', VTIME, tenant, after)
  elseif served > 0 then
    redis.call('ZADD', READY, after, tenant)
  end
  return served, #members
end

-- Turns past their queue deadline, whatever holds their tenant (a limit, or the order):
-- each round ends the first hundred, so none waits more than a round past it.
local function end_late()
  local due = redis.call('ZRANGEBYSCORE', DEADLINES, '-inf', now, 'LIMIT', 0, 100)
  if not due[1] then return end
  redis.call('ZREM', DEADLINES, unpack(due))
  local entries = redis.call('HMGET', MSGS, unpack(due))
  local gone, turn_ids, late, per = {}, {}, {}, {}
  for i, member in ipairs(due) do
    local entry = entries[i]
    -- Gone already: dispatched (by a release that leaves the index alone) or ended.
    if entry then
      local tenant = string.match(member, '^(.*)|[^|]*$')
      local turn, enqueued = string.match(entry, '^([^|]*)|([^|]*)|')
      gone[#gone + 1] = member
      if turn and tenant then
        turn_ids[#turn_ids + 1] = turn
        late[#late + 1] = turn
        late[#late + 1] = tenant .. '|' .. int(now - (finite(enqueued) or now))
        per[tenant] = (per[tenant] or 0) + 1
      end
    end
  end
  if not gone[1] then return end
  redis.call('ZREM', PENDING, unpack(gone))
  redis.call('HDEL', MSGS, unpack(gone))
  if turn_ids[1] then
    redis.call('HDEL', INDEX, unpack(turn_ids))
    redis.call('HSET', EXPIRED, unpack(late))
    expired = expired + #late / 2
  end
  for tenant, n in pairs(per) do
    if count_down(tenant, n) <= 0 then
      -- Nothing queued: idle, in neither ready nor parked (lib.lua), at its virtual time.
      redis.call('HDEL', QUEUED, tenant)
      local v = redis.call('ZSCORE', READY, tenant)
      if v then redis.call('HSET', VTIME, tenant, v) end
      redis.call('ZREM', READY, tenant)
      redis.call('ZREM', PARKED, tenant)
    end
  end
end
end_late()

local free = depth - redis.call('LLEN', QUEUE)
local room = math.min(most, free)
local looks = room + 200
while room > 0 and looks > 0 do
  looks = looks - 1
  local top = redis.call('ZRANGE', READY, 0, 1, 'WITHSCORES')
  if not top[1] then break end
  local tenant, v = top[1], vtime(top[2])
  if not v then
    -- Out of range (a hand edit): it starts again at the clock, as a tenant back from idle.
    redis.call('ZADD', READY, served_at or clock_now(), tenant)
  else
    local mif, tpm, itpm, weight = share(tenant)
    if drain then
      mif, tpm, itpm = nil, nil, nil
    end
    -- As many turns as come before the next tenant's: while the start tag stays below its
    -- virtual time (on a tie, the lower name first, as the ready set orders them).
    local want, tag, step = 1, v + 1 / weight, 1 / weight
    local bound, rival = top[4] and vtime(top[4]), top[3]
    while want < room and (not bound or tag < bound or (tag == bound and tenant < rival)) do
      want, tag = want + 1, tag + step
    end
    local turns, tokens
    if tpm or itpm then
      turns, tokens = buckets(tenant, tpm, itpm)
    end
    local held_now = mif and num(redis.call('HGET', INFLIGHT, tenant)) + (running[tenant] or 0)
    if mif and held_now >= mif then
      -- Looked at again when one of its turns concludes (a lease given back), or in a second.
      park(tenant, v, now + 1000, 'max_in_flight')
    elseif tpm and turns < 1 then
      park(tenant, v, now + math.ceil((1 - turns) * 60000 / tpm), 'turns_per_minute')
    else
      if mif then want = math.min(want, mif - held_now) end
      if tpm then want = math.min(want, math.floor(turns)) end
      local served, looked = visit(tenant, v, weight, want, turns, tokens, tpm, itpm)
      room = room - served
      looks = looks - looked
    end
  end
end
if served_at then
  redis.call('SET', CLOCK, served_at)
end
for tenant, n in pairs(running) do
  local ok, held_after = true, 1
  if n ~= 0 then
    ok, held_after = pcall(redis.call, 'HINCRBY', INFLIGHT, tenant, n)
  end
  if not ok then
    -- A count that is not one (a hand edit) starts again from this round's change.
    held_after = math.max(n, 0)
    redis.call('HSET', INFLIGHT, tenant, held_after)
  end
  if held_after <= 0 then
    redis.call('HDEL', INFLIGHT, tenant)
  end
end
local next_ms = first and int(math.max(first - now, 0)) or -1
local again = (room > 0 and looks <= 0) or (#moved == most and free > most)
return {moved, held, expired, next_ms, again and 1 or 0, unreadable, damaged, clamped}
