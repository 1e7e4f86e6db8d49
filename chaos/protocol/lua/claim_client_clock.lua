-- MUTANT client-clock: claim(lease_ms, worker, now_ms) scores the lease on the CALLER's clock:
-- deadline = now_ms + lease_ms. A worker whose clock runs behind gets a lease that is already
-- lapsed on the server; one whose clock runs ahead holds it too long.
-- The event stays truthful: ts is the server TIME, lease_ms as given, deadline as scored.
-- (Sound claim.lua uses the server TIME for the deadline.)
-- KEYS[1] pending  KEYS[2] active  KEYS[3] events
-- ARGV[1] job key prefix  ARGV[2] lease_ms  ARGV[3] worker  ARGV[4] caller's now, ms
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
local deadline = tonumber(ARGV[4]) + tonumber(ARGV[2])
redis.call('ZADD', KEYS[2], deadline, id)
redis.call('XADD', KEYS[3], '*', 'type', 'claim', 'id', id, 'attempt', attempt,
  'worker', ARGV[3], 'lease_ms', ARGV[2], 'deadline', deadline, 'ts', now)
return {id, redis.call('HGET', jk, 'payload'), attempt, deadline}
