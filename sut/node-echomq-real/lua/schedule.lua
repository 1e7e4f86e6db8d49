-- schedule: a new job that waits until its due time before anyone may claim it (EchoMQ's
-- @schedule, enqueue_in / enqueue_at, from its described effects).
-- KEYS[1] the job's row, KEYS[2] emq:{q}:schedule
-- ARGV[1] the id (JOB-namespaced), ARGV[2] the payload, ARGV[3] 'in' (ARGV[4] ms from now, on
-- the server's clock) or 'at' (ARGV[4] the due time in unix ms, the caller's)
-- Returns 1, or 0 when the row exists already (nothing written).
if string.sub(ARGV[1], 1, 3) ~= 'JOB' then
  return redis.error_reply('EMQKIND job id must be JOB-namespaced')
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local due = tonumber(ARGV[4])
if ARGV[3] == 'in' then
  local clock = redis.call('TIME')
  due = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) + due
end
redis.call('HSET', KEYS[1], 'state', 'scheduled', 'attempts', '0', 'payload', ARGV[2])
redis.call('ZADD', KEYS[2], due, ARGV[1])
return 1
