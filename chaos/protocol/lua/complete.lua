-- complete(id, attempt, worker): accept the result only from the current holder of an active lease.
-- KEYS[1] active  KEYS[2] events
-- ARGV[1] job key prefix  ARGV[2] id  ARGV[3] attempt  ARGV[4] worker
-- ARGV[5] optional: '0' = no event (benchmarks only: the cost of the evidence; default: record)
-- ARGV[6] optional: completed-job retention ms; > 0 expires the completed job's hash that long
--         after (a long run's memory stays flat). A late call after that finds no attempts and
--         is rejected, as it would be with the hash still there.
local record = ARGV[5] ~= '0'
local id = ARGV[2]
local jk = ARGV[1] .. id
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local current = tonumber(redis.call('HGET', jk, 'attempts') or '0')
if current == tonumber(ARGV[3]) and redis.call('ZSCORE', KEYS[1], id) then
  redis.call('ZREM', KEYS[1], id)
  redis.call('HSET', jk, 'state', 'completed')
  local retention_ms = tonumber(ARGV[6] or '0') or 0
  if retention_ms > 0 then
    redis.call('PEXPIRE', jk, retention_ms)
  end
  if record then
    redis.call('XADD', KEYS[2], '*', 'type', 'complete', 'id', id, 'attempt', ARGV[3],
      'worker', ARGV[4], 'ts', now)
  end
  return 1
end
if record then
  redis.call('XADD', KEYS[2], '*', 'type', 'complete_rejected', 'id', id, 'attempt', ARGV[3],
    'current_attempt', current, 'worker', ARGV[4], 'ts', now)
end
return 0
