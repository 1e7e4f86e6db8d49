-- reap: every lease past its deadline goes back to waiting (EchoMQ's @reap, from its described
-- effects): at most 100 a call, attempts untouched, nothing dead-lettered.
-- KEYS[1] emq:{q}:active, KEYS[2] emq:{q}:pending
-- ARGV[1] the queue's base emq:{q}:
-- Returns how many it moved.
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, 100)
local base = ARGV[1]
for _, id in ipairs(lapsed) do
  redis.call('ZREM', KEYS[1], id)
  local row = base .. 'job:' .. id
  local group = redis.call('HGET', row, 'group')
  if not group then
    redis.call('ZADD', KEYS[2], 0, id)
  else
    -- back to its own lane, one live lease fewer, and its group back on the ring if it may
    -- be served (not paused, below its limit)
    local live = redis.call('HINCRBY', base .. 'gactive', group, -1)
    if live <= 0 then
      redis.call('HDEL', base .. 'gactive', group)
    end
    redis.call('ZADD', base .. 'g:' .. group .. ':pending', 0, id)
    if redis.call('SISMEMBER', base .. 'paused', group) == 0 then
      local limit = redis.call('HGET', base .. 'glimit', group)
      if (not limit or live < tonumber(limit)) and not redis.call('LPOS', base .. 'ring', group) then
        redis.call('RPUSH', base .. 'ring', group)
        redis.call('LPUSH', base .. 'wake', '1')
        redis.call('LTRIM', base .. 'wake', 0, 63)
      end
    end
  end
  redis.call('HSET', row, 'state', 'pending')
end
return #lapsed
