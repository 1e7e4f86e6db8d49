-- glimit: the most leases a group may have live at once (EchoMQ.Lanes' limit): the group off
-- the ring once at its cap, back on below it if its lane has jobs and it is not paused.
-- KEYS[1] <base>glimit, KEYS[2] <base>gactive, KEYS[3] <base>ring, KEYS[4] <base>paused,
-- KEYS[5] <base>wake, KEYS[6] the group's lane <base>g:<group>:pending
-- ARGV[1] the group, ARGV[2] the limit (> 0). Returns 1.
local group, limit = ARGV[1], tonumber(ARGV[2])
redis.call('HSET', KEYS[1], group, ARGV[2])
if tonumber(redis.call('HGET', KEYS[2], group) or '0') >= limit then
  redis.call('LREM', KEYS[3], 0, group)
elseif redis.call('SISMEMBER', KEYS[4], group) == 0 and redis.call('ZCARD', KEYS[6]) > 0
    and not redis.call('LPOS', KEYS[3], group) then
  redis.call('RPUSH', KEYS[3], group)
  redis.call('LPUSH', KEYS[5], '1')
  redis.call('LTRIM', KEYS[5], 0, 63)
end
return 1
