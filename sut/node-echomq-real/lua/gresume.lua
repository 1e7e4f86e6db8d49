-- gresume: resume a paused group (EchoMQ.Lanes' resume, from its described effects): back on
-- the ring, with a wake, if its lane has jobs and it is below its limit of live leases.
-- KEYS[1] emq:{q}:paused, KEYS[2] emq:{q}:ring, KEYS[3] emq:{q}:glimit, KEYS[4] emq:{q}:gactive,
-- KEYS[5] emq:{q}:wake
-- ARGV[1] the queue's base emq:{q}:, ARGV[2] the group
-- Returns 1.
local group = ARGV[2]
redis.call('SREM', KEYS[1], group)
if redis.call('ZCARD', ARGV[1] .. 'g:' .. group .. ':pending') > 0 then
  local limit = redis.call('HGET', KEYS[3], group)
  local live = tonumber(redis.call('HGET', KEYS[4], group) or '0')
  if (not limit or live < tonumber(limit)) and not redis.call('LPOS', KEYS[2], group) then
    redis.call('RPUSH', KEYS[2], group)
    redis.call('LPUSH', KEYS[5], '1')
    redis.call('LTRIM', KEYS[5], 0, 63)
  end
end
return 1
