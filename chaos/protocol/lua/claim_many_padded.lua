-- MUTANT padded-lease: claim_many(lease_ms, worker, count) as claim_many.lua, but each deadline
-- written to active is padded by half a lease: now + lease_ms + lease_ms / 2, while each claim
-- event records lease_ms as asked (and the deadline as written).
-- KEYS[1] pending  KEYS[2] active  KEYS[3] events
-- ARGV[1] job key prefix  ARGV[2] lease_ms  ARGV[3] worker  ARGV[4] count (>= 1)
-- Returns {id, payload, attempt, deadline, id, payload, ...}: four entries per job, none if empty.
local popped = redis.call('ZPOPMIN', KEYS[1], tonumber(ARGV[4]))
if #popped == 0 then
  return {}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
local deadline = now + lease + math.floor(lease / 2)
local claimed = {}
for i = 1, #popped, 2 do
  local id = popped[i]
  local jk = ARGV[1] .. id
  local attempt = redis.call('HINCRBY', jk, 'attempts', 1)
  redis.call('HSET', jk, 'state', 'active', 'worker', ARGV[3])
  redis.call('ZADD', KEYS[2], deadline, id)
  redis.call('XADD', KEYS[3], '*', 'type', 'claim', 'id', id, 'attempt', attempt,
    'worker', ARGV[3], 'lease_ms', ARGV[2], 'deadline', deadline, 'ts', now)
  claimed[#claimed + 1] = id
  claimed[#claimed + 1] = redis.call('HGET', jk, 'payload')
  claimed[#claimed + 1] = attempt
  claimed[#claimed + 1] = deadline
end
return claimed
