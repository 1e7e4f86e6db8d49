-- MUTANT client-clock: reap(limit, now_ms) moves every lease whose deadline is at or before the
-- CALLER's now_ms. A reaper whose clock runs ahead reaps live leases early; one that runs behind
-- leaves lapsed leases stranded.
-- The events stay truthful: ts is the server TIME, deadline the score the lease had.
-- The stall limit works as in the sound reap.lua (ARGV[4] max_stalls, KEYS[4] dead), and so
-- does the `sweep` event every call records first (ARGV[5] the reaper's name).
-- KEYS[1] active  KEYS[2] pending  KEYS[3] events  KEYS[4] dead
-- ARGV[1] job key prefix  ARGV[2] limit  ARGV[3] caller's now, ms  ARGV[4] max_stalls
-- ARGV[5] the reaper's name
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max_stalls = tonumber(ARGV[4] or '0') or 0
redis.call('XADD', KEYS[3], '*', 'type', 'sweep', 'worker', ARGV[5] or '', 'ts', now)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[3]), 'WITHSCORES',
  'LIMIT', 0, tonumber(ARGV[2]))
for i = 1, #expired, 2 do
  local id = expired[i]
  local jk = ARGV[1] .. id
  redis.call('ZREM', KEYS[1], id)
  local stalls = redis.call('HINCRBY', jk, 'stalls', 1)
  local holder = redis.call('HMGET', jk, 'attempts', 'worker')
  local kind = 'reap'
  if max_stalls > 0 and stalls > max_stalls then
    kind = 'dead'
    redis.call('ZADD', KEYS[4], now, id)
    redis.call('HSET', jk, 'state', 'dead')
  else
    redis.call('ZADD', KEYS[2], 0, id)
    redis.call('HSET', jk, 'state', 'pending')
  end
  redis.call('XADD', KEYS[3], '*', 'type', kind, 'id', id, 'attempt', holder[1],
    'worker', holder[2] or '', 'deadline', expired[i + 1], 'stalls', stalls, 'ts', now)
end
return #expired / 2
