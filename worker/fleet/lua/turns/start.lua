-- start.lua: begin a run's text: what an earlier run of the turn streamed is dropped.
--
-- KEYS[1] chunks   the turn's stream
-- ARGV[1] the run's holder    ARGV[2] the TTL (s)    ARGV[3] the schema version
--
-- Returns the marker's id. Trimmed below the marker (MINID, not DEL: ids keep growing
-- for readers).

local id = redis.call('XADD', KEYS[1], '*', 'run', ARGV[1], 'text', '', 'schema_version', ARGV[3])
redis.call('XTRIM', KEYS[1], 'MINID', id)
redis.call('EXPIRE', KEYS[1], ARGV[2])
return id
