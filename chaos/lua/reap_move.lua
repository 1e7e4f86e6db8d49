-- MUTANT nonatomic-reap, step 2 of 2: push one scanned id back to pending, unconditionally:
-- no re-check that it is still in active or still lapsed. Two reapers that scanned the same id
-- both push it back, the second time from under its new holder (or after it completed).
-- The event stays truthful: the job's current attempt and worker, ts the server TIME, and the
-- deadline the id had in active when moved (empty when it was no longer active).
-- KEYS[1] active  KEYS[2] pending  KEYS[3] events
-- ARGV[1] job key prefix  ARGV[2] id
local id = ARGV[2]
local jk = ARGV[1] .. id
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', KEYS[1], id)
redis.call('ZREM', KEYS[1], id)
redis.call('ZADD', KEYS[2], 0, id)
redis.call('HSET', jk, 'state', 'pending')
local holder = redis.call('HMGET', jk, 'attempts', 'worker')
redis.call('XADD', KEYS[3], '*', 'type', 'reap', 'id', id, 'attempt', holder[1],
  'worker', holder[2] or '', 'deadline', score or '', 'ts', now)
if score then
  return 1
end
return 0
