-- complete: the holder finished the job (EchoMQ's @complete, from its described effects). The
-- row is deleted; the count in metrics:completed is the only record.
-- KEYS[1] emq:{q}:active, KEYS[2] the job's row; a flow's child also KEYS[3] its parent's
-- :dependencies, KEYS[4] the parent's :processed, KEYS[5] the parent's row
-- ARGV[1] the id, ARGV[2] the holder's token (its attempts), ARGV[3] the queue's base emq:{q}:;
-- a flow's child also ARGV[4] the parent's id, ARGV[5] its result, ARGV[6] 'eager' (broken on
-- purpose: the parent released at its first child's complete) or ''
-- The fan-in (EchoMQ.Flows): a child's own complete (its lease live) counts one child fewer
-- and, at the last, puts the parent into pending, if it is still held for its children.
-- Returns 1; 0 when the row is gone; an EMQSTALE error (nothing written) for a stale token.
local attempts = redis.call('HGET', KEYS[2], 'attempts')
if not attempts then
  return 0
end
if attempts ~= ARGV[2] then
  return redis.error_reply('EMQSTALE complete token mismatch')
end
local base = ARGV[3]
local group = redis.call('HGET', KEYS[2], 'group')
local was_active = redis.call('ZREM', KEYS[1], ARGV[1]) == 1
if not group then
  if not was_active then
    redis.call('ZREM', base .. 'pending', ARGV[1])
  end
else
  -- a grouped job settles through its lane: one live lease fewer, and the group back on the
  -- ring if it has jobs waiting and may be served (not paused, below its limit)
  local lane = base .. 'g:' .. group .. ':pending'
  if was_active then
    local live = redis.call('HINCRBY', base .. 'gactive', group, -1)
    if live <= 0 then
      redis.call('HDEL', base .. 'gactive', group)
    end
    if redis.call('SISMEMBER', base .. 'paused', group) == 0
        and redis.call('ZCARD', lane) > 0 then
      local limit = redis.call('HGET', base .. 'glimit', group)
      if (not limit or live < tonumber(limit)) and not redis.call('LPOS', base .. 'ring', group) then
        redis.call('RPUSH', base .. 'ring', group)
        redis.call('LPUSH', base .. 'wake', '1')
        redis.call('LTRIM', base .. 'wake', 0, 63)
      end
    end
  else
    redis.call('ZREM', lane, ARGV[1])
    if redis.call('ZCARD', lane) == 0 then
      redis.call('LREM', base .. 'ring', 0, group)
    end
  end
end
if KEYS[3] and was_active then
  local left = redis.call('DECR', KEYS[3])
  redis.call('HSET', KEYS[4], ARGV[1], ARGV[5])
  -- (a parent no longer held, failed with a child that died, stays as it is)
  local release = left <= 0 and redis.call('HGET', KEYS[5], 'state') == 'awaiting_children'
  if ARGV[6] == 'eager' then
    release = redis.call('HGET', KEYS[5], 'state') == 'awaiting_children'
  end
  if release then
    redis.call('ZADD', base .. 'pending', 0, ARGV[4])
    redis.call('HSET', KEYS[5], 'state', 'pending')
  end
end
redis.call('DEL', KEYS[2])
redis.call('HINCRBY', ARGV[3] .. 'metrics:completed', 'count', 1)
return 1
