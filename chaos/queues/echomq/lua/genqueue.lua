-- genqueue: admit a job into its group's lane, with the effects EchoMQ.Lanes' grouped
-- admission has (docs/echomq.md): the row with its group, the id in the group's lane, the group
-- on the ring while a claim may serve it (not paused, below its limit of live leases), a wake.
-- KEYS[1] the job's row, KEYS[2] its lane <base>g:<group>:pending, KEYS[3] <base>ring,
-- KEYS[4] <base>paused, KEYS[5] <base>glimit, KEYS[6] <base>gactive, KEYS[7] <base>wake
-- ARGV[1] the id, ARGV[2] the payload, ARGV[3] the group
-- Returns 1 when admitted, 0 for an id already there (nothing written).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local group = ARGV[3]
redis.call('HSET', KEYS[1], 'state', 'pending', 'attempts', '0', 'payload', ARGV[2],
  'group', group)
redis.call('ZADD', KEYS[2], 0, ARGV[1])
if redis.call('SISMEMBER', KEYS[4], group) == 1 then
  return 1
end
local limit = redis.call('HGET', KEYS[5], group)
if limit and tonumber(redis.call('HGET', KEYS[6], group) or '0') >= tonumber(limit) then
  return 1 -- back on the ring when one of its leases settles
end
if not redis.call('LPOS', KEYS[3], group) then
  redis.call('RPUSH', KEYS[3], group)
  redis.call('LPUSH', KEYS[7], '1')
  redis.call('LTRIM', KEYS[7], 0, 63)
end
return 1
