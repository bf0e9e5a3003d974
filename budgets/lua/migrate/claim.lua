-- claim.lua: take one old-layout budget key for this run, and read what it holds.
--
-- KEYS[1] the old key (or, to resume a claim a stopped run left, the claim itself)
-- KEYS[2] the claim: a name no other run uses, in the same {N} slot
-- KEYS[3] the set of claims in progress
--
-- RENAME is atomic: of several processes racing for one old key, one gets it; the others
-- find it gone. The set lets a later run find (and finish) a claim whose run stopped.
-- Returns false when there is nothing to claim, else {type, pttl, flat field/value list}
-- (a zset's members with their scores, member first).

if KEYS[1] ~= KEYS[2] then
  if redis.call('EXISTS', KEYS[1]) == 0 then return false end
  redis.call('RENAME', KEYS[1], KEYS[2])
  redis.call('SADD', KEYS[3], KEYS[2])
end
local kind = redis.call('TYPE', KEYS[2]).ok
local ttl = redis.call('PTTL', KEYS[2])
if kind == 'hash' then return {kind, ttl, redis.call('HGETALL', KEYS[2])} end
if kind == 'zset' then
  return {kind, ttl, redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')}
end
return {kind, ttl, {}}
