-- genqueue: admit a job into its group's lane (EchoMQ's grouped admission, from its described
-- effects). A lane is a per-group pending set; the ring lists the groups a claim may serve now
-- (a lane with jobs, its group not paused and below its limit of live leases).
-- KEYS[1] the job's row, KEYS[2] its lane emq:{q}:g:<group>:pending, KEYS[3] emq:{q}:ring,
-- KEYS[4] emq:{q}:paused (the paused groups), KEYS[5] emq:{q}:glimit, KEYS[6] emq:{q}:gactive,
-- KEYS[7] emq:{q}:wake
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
  return 1 -- a paused lane waits off the ring
end
local limit = redis.call('HGET', KEYS[5], group)
local live = tonumber(redis.call('HGET', KEYS[6], group) or '0')
if limit and live >= tonumber(limit) then
  return 1 -- at its limit: back on the ring when a lease of it settles
end
if not redis.call('LPOS', KEYS[3], group) then
  redis.call('RPUSH', KEYS[3], group)
  redis.call('LPUSH', KEYS[7], '1') -- wake a parked consumer
  redis.call('LTRIM', KEYS[7], 0, 63)
end
return 1
