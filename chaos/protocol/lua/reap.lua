-- reap(limit): every lease whose deadline is at or before the server clock goes back to pending,
-- scored 0 so recovered jobs are claimed first. Returns how many were moved; a caller that gets
-- a full batch (== limit) sweeps again at once.
-- Stall limit: every reap counts one stall on the job (HINCRBY stalls, in this same script, so
-- two reapers cannot both count one). With max_stalls > 0, the stall past it dead-letters the
-- job instead: ZADD dead, state=dead, a `dead` event, never back to pending. So a job is
-- recovered exactly max_stalls times, then dead. max_stalls 0 (or absent): no limit.
-- Every call records a `sweep` event first, whatever it moves (nothing, most of the time), with
-- the reaper's name: the history shows the reaper's cadence itself, not only through lapses.
-- KEYS[1] active  KEYS[2] pending  KEYS[3] events  KEYS[4] dead
-- ARGV[1] job key prefix  ARGV[2] limit  ARGV[3] max_stalls  ARGV[4] the reaper's name
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max_stalls = tonumber(ARGV[3] or '0') or 0
redis.call('XADD', KEYS[3], '*', 'type', 'sweep', 'worker', ARGV[4] or '', 'ts', now)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES',
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
