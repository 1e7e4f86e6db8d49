-- MUTANT nonatomic-reap, step 2 of 2: push one scanned id back to pending, unconditionally:
-- no re-check that it is still in active or still lapsed. Two reapers that scanned the same id
-- both push it back, the second time from under its new holder (or after it completed).
-- The event stays truthful: the job's current attempt and worker, ts the server TIME, and the
-- deadline the id had in active when moved (empty when it was no longer active).
-- The stall limit works as in the sound reap.lua (ARGV[3] max_stalls, KEYS[4] dead): each move
-- counts a stall, the one past the limit dead-letters the job.
-- KEYS[1] active  KEYS[2] pending  KEYS[3] events  KEYS[4] dead
-- ARGV[1] job key prefix  ARGV[2] id  ARGV[3] max_stalls
local id = ARGV[2]
local jk = ARGV[1] .. id
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', KEYS[1], id)
local max_stalls = tonumber(ARGV[3] or '0') or 0
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
  'worker', holder[2] or '', 'deadline', score or '', 'stalls', stalls, 'ts', now)
if score then
  return 1
end
return 0
