-- glimit: cap how many leases a group may have live at once (EchoMQ.Lanes' limit, from its
-- described effects): its group off the ring once at the cap, back on below it.
-- KEYS[1] emq:{q}:glimit, KEYS[2] emq:{q}:gactive, KEYS[3] emq:{q}:ring, KEYS[4] emq:{q}:paused,
-- KEYS[5] emq:{q}:wake
-- ARGV[1] the queue's base emq:{q}:, ARGV[2] the group, ARGV[3] the limit (> 0)
-- Returns 1.
local group, limit = ARGV[2], tonumber(ARGV[3])
redis.call('HSET', KEYS[1], group, ARGV[3])
local live = tonumber(redis.call('HGET', KEYS[2], group) or '0')
if live >= limit then
  redis.call('LREM', KEYS[3], 0, group)
elseif redis.call('SISMEMBER', KEYS[4], group) == 0
    and redis.call('ZCARD', ARGV[1] .. 'g:' .. group .. ':pending') > 0
    and not redis.call('LPOS', KEYS[3], group) then
  redis.call('RPUSH', KEYS[3], group)
  redis.call('LPUSH', KEYS[5], '1')
  redis.call('LTRIM', KEYS[5], 0, 63)
end
return 1
