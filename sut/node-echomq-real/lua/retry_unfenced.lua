-- BROKEN ON PURPOSE (--break unfenced-retry): retry.lua without its token check. A holder
-- whose lease was reaped and re-claimed by another worker still hands the job back, taking it
-- out of active from under the new holder's feet and into the schedule.
-- KEYS[1] emq:{q}:active, KEYS[2] emq:{q}:schedule, KEYS[3] emq:{q}:dead, KEYS[4] the row
-- ARGV[1] the id, ARGV[2] the holder's token, ARGV[3] the delay in ms, ARGV[4] the max
-- attempts, ARGV[5] the error, ARGV[6] the queue's base emq:{q}:
-- Returns 'scheduled' or 'dead'; an EMQSTALE error for a row gone.
local attempts = redis.call('HGET', KEYS[4], 'attempts')
if not attempts then
  return redis.error_reply('EMQSTALE job gone')
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
  return 'dead'
end
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('HSET', KEYS[4], 'state', 'scheduled')
redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[3]), ARGV[1])
return 'scheduled'
