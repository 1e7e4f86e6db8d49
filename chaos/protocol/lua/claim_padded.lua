-- MUTANT padded-lease: claim(lease_ms, worker) as claim.lua, but the deadline written to active
-- is padded by half a lease (a "grace" for slow workers): now + lease_ms + lease_ms / 2. The
-- event records lease_ms as asked and the deadline as written, so the history shows both: a
-- checker that read only the recorded lease_ms would see the configured lease.
-- (Sound claim.lua writes deadline = now + lease_ms.)
-- KEYS[1] pending  KEYS[2] active  KEYS[3] events
-- ARGV[1] job key prefix  ARGV[2] lease_ms  ARGV[3] worker
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
local lease = tonumber(ARGV[2])
local deadline = now + lease + math.floor(lease / 2)
redis.call('ZADD', KEYS[2], deadline, id)
redis.call('XADD', KEYS[3], '*', 'type', 'claim', 'id', id, 'attempt', attempt,
  'worker', ARGV[3], 'lease_ms', ARGV[2], 'deadline', deadline, 'ts', now)
return {id, redis.call('HGET', jk, 'payload'), attempt, deadline}
