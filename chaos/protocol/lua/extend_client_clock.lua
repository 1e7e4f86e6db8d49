-- MUTANT client-clock: extend(id, attempt, lease_ms, now_ms) is fenced like the sound extend,
-- but the new deadline is the CALLER's now_ms + lease_ms.
-- The event stays truthful: ts is the server TIME, lease_ms as given, deadline as scored.
-- KEYS[1] active  KEYS[2] events
-- ARGV[1] job key prefix  ARGV[2] id  ARGV[3] attempt  ARGV[4] lease_ms  ARGV[5] worker
-- ARGV[6] the caller's round trip of its previous extend, ms ('' = none yet): recorded
--         as rtt_ms, so the history carries the extend latency the lease must absorb
-- ARGV[7] caller's now, ms
local id = ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local current = tonumber(redis.call('HGET', ARGV[1] .. id, 'attempts') or '0')
if current == tonumber(ARGV[3]) and redis.call('ZSCORE', KEYS[1], id) then
  local deadline = tonumber(ARGV[7]) + tonumber(ARGV[4])
  redis.call('ZADD', KEYS[1], 'XX', deadline, id)
  redis.call('XADD', KEYS[2], '*', 'type', 'extend', 'id', id, 'attempt', ARGV[3],
    'worker', ARGV[5], 'lease_ms', ARGV[4], 'deadline', deadline, 'ts', now,
    'rtt_ms', ARGV[6] or '')
  return deadline
end
redis.call('XADD', KEYS[2], '*', 'type', 'extend_rejected', 'id', id, 'attempt', ARGV[3],
  'current_attempt', current, 'worker', ARGV[5], 'ts', now, 'rtt_ms', ARGV[6] or '')
return false
