-- extend(id, attempt, lease_ms): move the lease deadline to now + lease_ms, but only for the
-- current holder (attempt matches) of a lease that is still active (not reaped, not completed).
-- KEYS[1] active  KEYS[2] events
-- ARGV[1] job key prefix  ARGV[2] id  ARGV[3] attempt  ARGV[4] lease_ms  ARGV[5] worker
-- ARGV[6] the caller's round trip of its previous extend, ms ('' = none yet): recorded
--         as rtt_ms, so the history carries the extend latency the lease must absorb
-- ARGV[7] optional: '0' = no event (benchmarks only: the cost of the evidence; default: record)
local record = ARGV[7] ~= '0'
local id = ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local current = tonumber(redis.call('HGET', ARGV[1] .. id, 'attempts') or '0')
if current == tonumber(ARGV[3]) and redis.call('ZSCORE', KEYS[1], id) then
  local deadline = now + tonumber(ARGV[4])
  redis.call('ZADD', KEYS[1], 'XX', deadline, id)
  if record then
    redis.call('XADD', KEYS[2], '*', 'type', 'extend', 'id', id, 'attempt', ARGV[3],
      'worker', ARGV[5], 'lease_ms', ARGV[4], 'deadline', deadline, 'ts', now,
      'rtt_ms', ARGV[6] or '')
  end
  return deadline
end
if record then
  redis.call('XADD', KEYS[2], '*', 'type', 'extend_rejected', 'id', id, 'attempt', ARGV[3],
    'current_attempt', current, 'worker', ARGV[5], 'ts', now, 'rtt_ms', ARGV[6] or '')
end
return false
