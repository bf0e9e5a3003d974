-- epoch.lua: the store's epoch id, made now if it has none (a new store, or one that
-- lost its data). Concurrent callers all get the one id that won.
--
-- KEYS[1] the store's epoch hash
-- ARGV[1] clock (clock.lua; always the server's here: kill_restore.lua compares with it)
-- ARGV[2] a fresh random id, kept if the store has none
-- Returns the epoch id. One this call made notes when (born_ms), so that a worker's
-- restore of the kill switch lands only in the new epoch's first moments.

if redis.call('HSETNX', KEYS[1], 'id', ARGV[2]) == 1 then
  redis.call('HSET', KEYS[1], 'born_ms', now_ms())
  return ARGV[2]
end
return redis.call('HGET', KEYS[1], 'id')
