-- MUTANT nonatomic-claim, step 2 of 2: lease an id the caller already popped from pending (with a
-- plain ZPOPMIN, in an earlier round trip). Between the two steps the job is in neither pending
-- nor active: a worker that dies in that gap loses it for good, and nothing records the pop.
-- Does exactly what the sound claim.lua does after its ZPOPMIN, and records the same event.
-- KEYS[1] active  KEYS[2] events
-- ARGV[1] job key prefix  ARGV[2] id  ARGV[3] lease_ms  ARGV[4] worker
local id = ARGV[2]
local jk = ARGV[1] .. id
local attempt = redis.call('HINCRBY', jk, 'attempts', 1)
redis.call('HSET', jk, 'state', 'active', 'worker', ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = now + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], deadline, id)
redis.call('XADD', KEYS[2], '*', 'type', 'claim', 'id', id, 'attempt', attempt,
  'worker', ARGV[4], 'lease_ms', ARGV[3], 'deadline', deadline, 'ts', now)
return {id, redis.call('HGET', jk, 'payload'), attempt, deadline}
