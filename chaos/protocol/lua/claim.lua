-- claim(lease_ms, worker): pop the oldest pending job and lease it until now + lease_ms.
-- The HINCRBY on attempts is the fencing token the worker must show on extend and complete.
-- KEYS[1] pending  KEYS[2] active  KEYS[3] events
-- ARGV[1] job key prefix  ARGV[2] lease_ms  ARGV[3] worker
-- ARGV[4] optional: '0' = no event (benchmarks only: the cost of the evidence; default: record)
local popped = redis.call('ZPOPMIN', KEYS[1])
if #popped == 0 then
  return false
end
local id = popped[1]
local jk = ARGV[1] .. id
local attempt = redis.call('HINCRBY', jk, 'attempts', 1)
redis.call('HSET', jk, 'state', 'active', 'worker', ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[2], deadline, id)
if ARGV[4] ~= '0' then
  redis.call('XADD', KEYS[3], '*', 'type', 'claim', 'id', id, 'attempt', attempt,
    'worker', ARGV[3], 'lease_ms', ARGV[2], 'deadline', deadline, 'ts', now)
end
return {id, redis.call('HGET', jk, 'payload'), attempt, deadline}
