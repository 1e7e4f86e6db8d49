-- BROKEN ON PURPOSE (--break unfenced-complete): complete.lua without its token check. A
-- holder whose lease was reaped and re-claimed by another worker still completes the job,
-- under the new holder's feet.
-- KEYS[1] emq:{q}:active, KEYS[2] the job's row
-- ARGV[1] the id, ARGV[2] the holder's token (ignored), ARGV[3] the queue's base emq:{q}:
if not redis.call('HGET', KEYS[2], 'attempts') then
  return 0
end
-- EchoMQ reads the group here (a grouped job settles through its lane); this SUT's jobs
-- are flat, and the read is kept so the call runs EchoMQ's commands in EchoMQ's order.
redis.call('HGET', KEYS[2], 'group')
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  redis.call('ZREM', ARGV[3] .. 'pending', ARGV[1])
end
redis.call('DEL', KEYS[2])
redis.call('HINCRBY', ARGV[3] .. 'metrics:completed', 'count', 1)
return 1
