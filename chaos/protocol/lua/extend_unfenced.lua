-- MUTANT unfenced-complete: extend(id, attempt, lease_ms) renews any active lease of the id,
-- whatever the attempt: a stale holder keeps the current holder's lease alive.
-- (Sound extend.lua also checks attempts == attempt.)
-- KEYS[1] active  KEYS[2] events
-- ARGV[1] job key prefix  ARGV[2] id  ARGV[3] attempt  ARGV[4] lease_ms  ARGV[5] worker
-- ARGV[6] the caller's round trip of its previous extend, ms ('' = none yet): recorded
--         as rtt_ms, so the history carries the extend latency the lease must absorb
local id = ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('ZSCORE', KEYS[1], id) then
  local deadline = now + tonumber(ARGV[4])
  redis.call('ZADD', KEYS[1], 'XX', deadline, id)
  redis.call('XADD', KEYS[2], '*', 'type', 'extend', 'id', id, 'attempt', ARGV[3],
    'worker', ARGV[5], 'lease_ms', ARGV[4], 'deadline', deadline, 'ts', now,
    'rtt_ms', ARGV[6] or '')
  return deadline
end
local current = tonumber(redis.call('HGET', ARGV[1] .. id, 'attempts') or '0')
redis.call('XADD', KEYS[2], '*', 'type', 'extend_rejected', 'id', id, 'attempt', ARGV[3],
  'current_attempt', current, 'worker', ARGV[5], 'ts', now, 'rtt_ms', ARGV[6] or '')
return false
