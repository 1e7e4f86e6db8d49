-- sweep_stalled: every lease past its deadline counts a stall on its job's row; a job whose
-- count has reached ARGV[2] is dead-lettered, any other goes back to waiting, a grouped one into
-- its own lane (EchoMQ's @sweep_stalled, EchoMQ.Stalled, from its described effects). So a job
-- is recovered ARGV[2] - 1 times, then dead.
-- KEYS[1] emq:{q}:active, KEYS[2] emq:{q}:pending, KEYS[3] emq:{q}:dead
-- ARGV[1] the queue's base emq:{q}:, ARGV[2] max_stalled, ARGV[3] the most it takes a call
-- Returns {recovered ids, dead ids}.
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0,
  tonumber(ARGV[3]))
local recovered, dead = {}, {}
local base = ARGV[1]
for _, id in ipairs(lapsed) do
  local row = base .. 'job:' .. id
  redis.call('ZREM', KEYS[1], id)
  local group = redis.call('HGET', row, 'group')
  local live = 0
  if group then -- a grouped job's lease ends either way: one live lease fewer in its group
    live = redis.call('HINCRBY', base .. 'gactive', group, -1)
    if live <= 0 then
      redis.call('HDEL', base .. 'gactive', group)
    end
  end
  local stalls = redis.call('HINCRBY', row, 'stalled', 1)
  if stalls >= tonumber(ARGV[2]) then
    redis.call('HSET', row, 'state', 'dead')
    redis.call('HSET', row, 'last_error', 'stalled')
    redis.call('ZADD', KEYS[3], 0, id)
    redis.call('HINCRBY', base .. 'metrics:failed', 'count', 1)
    dead[#dead + 1] = id
  else
    if not group then
      redis.call('ZADD', KEYS[2], 0, id)
    else -- back to its own lane, its group back on the ring if it may be served
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
    recovered[#recovered + 1] = id
  end
end
return {recovered, dead}
