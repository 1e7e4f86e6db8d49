-- MUTANT client-clock: reap(limit, now_ms) moves every lease whose deadline is at or before the
-- CALLER's now_ms. A reaper whose clock runs ahead reaps live leases early; one that runs behind
-- leaves lapsed leases stranded.
-- The events stay truthful: ts is the server TIME, deadline the score the lease had.
-- KEYS[1] active  KEYS[2] pending  KEYS[3] events
-- ARGV[1] job key prefix  ARGV[2] limit  ARGV[3] caller's now, ms
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[3]), 'WITHSCORES',
  'LIMIT', 0, tonumber(ARGV[2]))
for i = 1, #expired, 2 do
  local id = expired[i]
  local jk = ARGV[1] .. id
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], 0, id)
  redis.call('HSET', jk, 'state', 'pending')
  local holder = redis.call('HMGET', jk, 'attempts', 'worker')
  redis.call('XADD', KEYS[3], '*', 'type', 'reap', 'id', id, 'attempt', holder[1],
    'worker', holder[2] or '', 'deadline', expired[i + 1], 'ts', now)
end
return #expired / 2
