-- complete: the holder finished the job (EchoMQ's @complete for a flat job, from its described
-- effects). The row is deleted; the count in metrics:completed is the only record.
-- KEYS[1] emq:{q}:active, KEYS[2] the job's row
-- ARGV[1] the id, ARGV[2] the holder's token (its attempts), ARGV[3] the queue's base emq:{q}:
-- Returns 1; 0 when the row is gone; an EMQSTALE error (nothing written) for a stale token.
local attempts = redis.call('HGET', KEYS[2], 'attempts')
if not attempts then
  return 0
end
if attempts ~= ARGV[2] then
  return redis.error_reply('EMQSTALE complete token mismatch')
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
