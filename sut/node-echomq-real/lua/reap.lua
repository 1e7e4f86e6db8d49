-- reap: every lease past its deadline goes back to waiting (EchoMQ's @reap for flat jobs, from
-- its described effects): at most 100 a call, attempts untouched, nothing dead-lettered.
-- KEYS[1] emq:{q}:active, KEYS[2] emq:{q}:pending
-- ARGV[1] the queue's base emq:{q}:
-- Returns how many it moved.
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, 100)
for _, id in ipairs(lapsed) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('HGET', ARGV[1] .. 'job:' .. id, 'group') -- flat jobs only: see complete.lua
  redis.call('ZADD', KEYS[2], 0, id)
  redis.call('HSET', ARGV[1] .. 'job:' .. id, 'state', 'pending')
end
return #lapsed
