-- MUTANT padded-lease: extend(id, attempt, lease_ms) is fenced like the sound extend, but the
-- new deadline written to active is padded by half a lease: now + lease_ms + lease_ms / 2. The
-- event records lease_ms as asked (and the deadline as written).
-- KEYS[1] active  KEYS[2] events
-- ARGV[1] job key prefix  ARGV[2] id  ARGV[3] attempt  ARGV[4] lease_ms  ARGV[5] worker
-- ARGV[6] the caller's round trip of its previous extend, ms ('' = none yet): recorded
--         as rtt_ms, so the history carries the extend latency the lease must absorb
local id = ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local current = tonumber(redis.call('HGET', ARGV[1] .. id, 'attempts') or '0')
if current == tonumber(ARGV[3]) and redis.call('ZSCORE', KEYS[1], id) then
  local lease = tonumber(ARGV[4])
  local deadline = now + lease + math.floor(lease / 2)
  redis.call('ZADD', KEYS[1], 'XX', deadline, id)
  redis.call('XADD', KEYS[2], '*', 'type', 'extend', 'id', id, 'attempt', ARGV[3],
    'worker', ARGV[5], 'lease_ms', ARGV[4], 'deadline', deadline, 'ts', now,
    'rtt_ms', ARGV[6] or '')
  return deadline
end
redis.call('XADD', KEYS[2], '*', 'type', 'extend_rejected', 'id', id, 'attempt', ARGV[3],
  'current_attempt', current, 'worker', ARGV[5], 'ts', now, 'rtt_ms', ARGV[6] or '')
return false
