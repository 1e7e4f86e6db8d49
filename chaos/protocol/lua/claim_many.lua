-- claim_many(lease_ms, worker, count): claim up to count pending jobs in one call, oldest first,
-- each exactly as claim.lua claims one: its own fencing token (HINCRBY attempts), its lease until
-- now + lease_ms, and its own claim event. One TIME serves them all (one script, one instant).
-- KEYS[1] pending  KEYS[2] active  KEYS[3] events
-- ARGV[1] job key prefix  ARGV[2] lease_ms  ARGV[3] worker  ARGV[4] count (>= 1)
-- ARGV[5] optional: '0' = no event (benchmarks only: the cost of the evidence; default: record)
-- Returns {id, payload, attempt, deadline, id, payload, ...}: four entries per job, none if empty.
local popped = redis.call('ZPOPMIN', KEYS[1], tonumber(ARGV[4]))
if #popped == 0 then
  return {}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = now + tonumber(ARGV[2])
local claimed = {}
for i = 1, #popped, 2 do
  local id = popped[i]
  local jk = ARGV[1] .. id
  local attempt = redis.call('HINCRBY', jk, 'attempts', 1)
  redis.call('HSET', jk, 'state', 'active', 'worker', ARGV[3])
  redis.call('ZADD', KEYS[2], deadline, id)
  if ARGV[5] ~= '0' then
    redis.call('XADD', KEYS[3], '*', 'type', 'claim', 'id', id, 'attempt', attempt,
      'worker', ARGV[3], 'lease_ms', ARGV[2], 'deadline', deadline, 'ts', now)
  end
  claimed[#claimed + 1] = id
  claimed[#claimed + 1] = redis.call('HGET', jk, 'payload')
  claimed[#claimed + 1] = attempt
  claimed[#claimed + 1] = deadline
end
return claimed
