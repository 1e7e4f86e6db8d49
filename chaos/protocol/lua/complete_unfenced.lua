-- MUTANT unfenced-complete: complete(id, attempt, worker) accepts any caller, whatever its attempt
-- and whether or not the lease is still active. A worker that wakes up after its job was reaped
-- and re-run elsewhere completes it a second time.
-- (Sound complete.lua checks attempts == attempt and that the id is in active.)
-- KEYS[1] active  KEYS[2] events
-- ARGV[1] job key prefix  ARGV[2] id  ARGV[3] attempt  ARGV[4] worker
local id = ARGV[2]
local jk = ARGV[1] .. id
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREM', KEYS[1], id)
redis.call('HSET', jk, 'state', 'completed')
redis.call('XADD', KEYS[2], '*', 'type', 'complete', 'id', id, 'attempt', ARGV[3],
  'worker', ARGV[4], 'ts', now)
return 1
