-- MUTANT complete-skips-active: complete(id, attempt, worker) checks the fencing token but not
-- that the lease is still active. Between a reap and the next claim the attempt is unchanged, so
-- the reaped holder's late complete is accepted for a job that is back in pending: it is then
-- claimed and completed again.
-- (Sound complete.lua also checks ZSCORE active.)
-- KEYS[1] active  KEYS[2] events
-- ARGV[1] job key prefix  ARGV[2] id  ARGV[3] attempt  ARGV[4] worker
local id = ARGV[2]
local jk = ARGV[1] .. id
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local current = tonumber(redis.call('HGET', jk, 'attempts') or '0')
if current == tonumber(ARGV[3]) then
  redis.call('ZREM', KEYS[1], id)
  redis.call('HSET', jk, 'state', 'completed')
  redis.call('XADD', KEYS[2], '*', 'type', 'complete', 'id', id, 'attempt', ARGV[3],
    'worker', ARGV[4], 'ts', now)
  return 1
end
redis.call('XADD', KEYS[2], '*', 'type', 'complete_rejected', 'id', id, 'attempt', ARGV[3],
  'current_attempt', current, 'worker', ARGV[4], 'ts', now)
return 0
