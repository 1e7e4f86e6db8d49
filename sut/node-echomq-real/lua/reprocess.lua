-- reprocess: a dead job back to pending (EchoMQ's @reprocess, from its described effects):
-- its failure cleared, its row pending again, its attempts kept (the next claim raises them).
-- KEYS[1] the row, KEYS[2] dead, KEYS[3] pending
-- ARGV[1] the id
-- Returns 1; -1 when the row is gone; an EMQSTATE error (nothing written) for a job not dead.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if redis.call('ZREM', KEYS[2], ARGV[1]) ~= 1 then
  return redis.error_reply('EMQSTATE not dead')
end
redis.call('HDEL', KEYS[1], 'last_error')
redis.call('HSET', KEYS[1], 'state', 'pending')
redis.call('ZADD', KEYS[3], 0, ARGV[1])
return 1
