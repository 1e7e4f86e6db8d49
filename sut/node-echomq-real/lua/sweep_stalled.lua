-- sweep_stalled: every lease past its deadline counts a stall on its job's row; a job whose
-- count has reached ARGV[2] is dead-lettered, any other goes back to waiting (EchoMQ's
-- @sweep_stalled, EchoMQ.Stalled, for flat jobs, from its described effects). So a job is
-- recovered ARGV[2] - 1 times, then dead.
-- KEYS[1] emq:{q}:active, KEYS[2] emq:{q}:pending, KEYS[3] emq:{q}:dead
-- ARGV[1] the queue's base emq:{q}:, ARGV[2] max_stalled, ARGV[3] the most it takes a call
-- Returns {recovered ids, dead ids}.
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0,
  tonumber(ARGV[3]))
local recovered, dead = {}, {}
for _, id in ipairs(lapsed) do
  local row = ARGV[1] .. 'job:' .. id
  redis.call('ZREM', KEYS[1], id)
  redis.call('HGET', row, 'group') -- flat jobs only: see complete.lua
  local stalls = redis.call('HINCRBY', row, 'stalled', 1)
  if stalls >= tonumber(ARGV[2]) then
    redis.call('HSET', row, 'state', 'dead')
    redis.call('HSET', row, 'last_error', 'stalled')
    redis.call('ZADD', KEYS[3], 0, id)
    redis.call('HINCRBY', ARGV[1] .. 'metrics:failed', 'count', 1)
    dead[#dead + 1] = id
  else
    redis.call('ZADD', KEYS[2], 0, id)
    redis.call('HSET', row, 'state', 'pending')
    recovered[#recovered + 1] = id
  end
end
return {recovered, dead}
