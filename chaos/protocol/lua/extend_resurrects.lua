-- MUTANT extend-resurrects: extend(id, attempt, lease_ms) checks the attempt but not that the id
-- is still active, and adds it back (ZADD without XX). A heartbeat that races its own complete,
-- or lands after a reap and before the re-claim, puts a finished or reaped job back in active;
-- the reaper later recovers it and it runs again.
-- (Sound extend.lua also requires the id to be in active, and uses ZADD XX.)
-- KEYS[1] active  KEYS[2] events
-- ARGV[1] job key prefix  ARGV[2] id  ARGV[3] attempt  ARGV[4] lease_ms  ARGV[5] worker
-- ARGV[6] the caller's round trip of its previous extend, ms ('' = none yet): recorded
--         as rtt_ms, so the history carries the extend latency the lease must absorb
local id = ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local current = tonumber(redis.call('HGET', ARGV[1] .. id, 'attempts') or '0')
if current == tonumber(ARGV[3]) then
  local deadline = now + tonumber(ARGV[4])
  redis.call('ZADD', KEYS[1], deadline, id)
  redis.call('XADD', KEYS[2], '*', 'type', 'extend', 'id', id, 'attempt', ARGV[3],
    'worker', ARGV[5], 'lease_ms', ARGV[4], 'deadline', deadline, 'ts', now,
    'rtt_ms', ARGV[6] or '')
  return deadline
end
redis.call('XADD', KEYS[2], '*', 'type', 'extend_rejected', 'id', id, 'attempt', ARGV[3],
  'current_attempt', current, 'worker', ARGV[5], 'ts', now, 'rtt_ms', ARGV[6] or '')
return false
