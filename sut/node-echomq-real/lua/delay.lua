-- delay: the holder puts its job off, to run again later without spending an attempt
-- (EchoMQ's @delay, from its described effects): out of active, into the schedule. Fenced by
-- the token alone.
-- KEYS[1] the job's row, KEYS[2] emq:{q}:active, KEYS[3] emq:{q}:schedule
-- ARGV[1] the id, ARGV[2] the holder's token, ARGV[3] 'in' (ARGV[4] ms from now, on the
-- server's clock) or 'at' (ARGV[4] the due time in unix ms, the caller's)
-- Returns 1; an EMQSTALE error (nothing written) for a row gone or a stale token.
if string.sub(ARGV[1], 1, 3) ~= 'JOB' then
  return redis.error_reply('EMQKIND job id must be JOB-namespaced')
end
local attempts = redis.call('HGET', KEYS[1], 'attempts')
if not attempts then
  return redis.error_reply('EMQSTALE job gone')
end
if attempts ~= ARGV[2] then
  return redis.error_reply('EMQSTALE delay token mismatch')
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'state', 'scheduled')
local due = tonumber(ARGV[4])
if ARGV[3] == 'in' then
  local clock = redis.call('TIME')
  due = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) + due
end
redis.call('ZADD', KEYS[3], due, ARGV[1])
return 1
