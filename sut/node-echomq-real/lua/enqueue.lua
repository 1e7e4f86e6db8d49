-- enqueue: a new job, waiting (EchoMQ's @enqueue, from its described effects).
-- KEYS[1] the job's row emq:{q}:job:<id>, KEYS[2] emq:{q}:pending
-- ARGV[1] the id (JOB-namespaced), ARGV[2] the payload
-- Returns 1, or 0 when the row exists already (a duplicate id: nothing written).
if string.sub(ARGV[1], 1, 3) ~= 'JOB' then
  return redis.error_reply('EMQKIND job id must be JOB-namespaced')
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'pending', 'attempts', '0', 'payload', ARGV[2])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return 1
