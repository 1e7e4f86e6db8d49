-- promote: every scheduled job whose due time has come goes back to waiting (EchoMQ's
-- @promote for flat jobs, from its described effects), at most ARGV[2] a call.
-- KEYS[1] emq:{q}:schedule, KEYS[2] emq:{q}:pending
-- ARGV[1] the queue's base emq:{q}:, ARGV[2] the batch
-- Returns how many it moved.
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('HGET', ARGV[1] .. 'job:' .. id, 'group') -- flat jobs only: see complete.lua
  redis.call('ZADD', KEYS[2], 0, id)
  redis.call('HSET', ARGV[1] .. 'job:' .. id, 'state', 'pending')
end
return #due
