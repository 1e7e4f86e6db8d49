-- retry: the holder's handler failed, so the job runs again once a delay has passed, or, at
-- its last attempt, it is dead-lettered (EchoMQ's @retry for a flat job, from its described
-- effects). Fenced by the token alone, as complete.lua: the row's attempts must equal it.
-- KEYS[1] emq:{q}:active, KEYS[2] emq:{q}:schedule, KEYS[3] emq:{q}:dead, KEYS[4] the row;
-- a flow's child also KEYS[5] its parent's row, KEYS[6] the parent's :dependencies, KEYS[7]
-- the parent's :failed, KEYS[8] the parent's :unsuccessful
-- ARGV[1] the id, ARGV[2] the holder's token, ARGV[3] the delay in ms, ARGV[4] the max
-- attempts, ARGV[5] the error, ARGV[6] the queue's base emq:{q}:; a flow's child also ARGV[7]
-- its parent's id
-- A flow's child dead at its last attempt passes its death to a parent still held for it, by
-- the child's parent_policy (EchoMQ's @retry arms): 'ignore' counts it settled (its error in
-- the parent's :unsuccessful; at the last child the parent goes to pending), anything else
-- fails the parent with it (its error in :failed, the parent dead, failed for good).
-- Returns 'scheduled' (due at now + delay on the server's clock) or 'dead'; an EMQSTALE error
-- (nothing written) for a row gone or a stale token. Attempts are left as they are: the next
-- claim raises them.
local attempts = redis.call('HGET', KEYS[4], 'attempts')
if not attempts then
  return redis.error_reply('EMQSTALE job gone')
end
if attempts ~= ARGV[2] then
  return redis.error_reply('EMQSTALE retry token mismatch')
end
redis.call('HGET', KEYS[4], 'group') -- flat jobs only: see complete.lua
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  redis.call('ZREM', ARGV[6] .. 'pending', ARGV[1])
end
redis.call('HSET', KEYS[4], 'last_error', ARGV[5])
if tonumber(attempts) >= tonumber(ARGV[4]) then
  redis.call('HSET', KEYS[4], 'state', 'dead')
  redis.call('ZADD', KEYS[3], 0, ARGV[1])
  redis.call('HINCRBY', ARGV[6] .. 'metrics:failed', 'count', 1)
  if KEYS[5] and redis.call('HGET', KEYS[5], 'state') == 'awaiting_children' then
    if redis.call('HGET', KEYS[4], 'parent_policy') == 'ignore' then
      redis.call('HSET', KEYS[8], ARGV[1], ARGV[5])
      if redis.call('DECR', KEYS[6]) <= 0 then
        redis.call('ZADD', ARGV[6] .. 'pending', 0, ARGV[7])
        redis.call('HSET', KEYS[5], 'state', 'pending')
      end
    else
      redis.call('HSET', KEYS[7], ARGV[1], ARGV[5])
      redis.call('HSET', KEYS[5], 'state', 'dead')
      redis.call('ZADD', KEYS[3], 0, ARGV[7])
    end
  end
  return 'dead'
end
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('HSET', KEYS[4], 'state', 'scheduled')
redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[3]), ARGV[1])
return 'scheduled'
