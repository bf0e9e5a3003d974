-- replace.lua: save a turn's result over a "rejected" one (or none); the one that stands.
--
-- KEYS[1] result   the turn's result (a string, JSON)
-- KEYS[2] chunks   (optional) the turn's stream, ended first
-- ARGV[1] the new result    ARGV[2] its TTL (s)    ARGV[3] the stream's length cap
--
-- Returns the result that stands (false: ours). Only a missing or "rejected" result
-- gives way: one that answered stands.

if KEYS[2] then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'end', '1')
  redis.call('EXPIRE', KEYS[2], ARGV[2])
end
local standing = redis.call('GET', KEYS[1])
if standing then
  local ok, saved = pcall(cjson.decode, standing)
  if not ok or type(saved) ~= 'table' or saved['status'] ~= 'rejected' then
    return standing
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('PUBLISH', KEYS[1], ARGV[1])
return false
