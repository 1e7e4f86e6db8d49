-- extend_locks: renew every lease a worker holds (EchoMQ's @extend_locks, from its described
-- effects). Fenced by the token alone: a pair is renewed when its row's attempts equal the
-- token, with no look at whether the id is still in active (ZADD puts it back if it is not,
-- as EchoMQ's does: a job reaped but not yet re-claimed is resurrected by its old holder).
-- KEYS[1] emq:{q}:active
-- ARGV[1] the queue's base emq:{q}:, ARGV[2] the lease in ms, then id, token, id, token, ...
-- Returns the ids not renewed (token stale, or row gone). Never an error.
local clock = redis.call('TIME')
local deadline = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  + tonumber(ARGV[2])
local failed = {}
for i = 3, #ARGV - 1, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  if redis.call('HGET', ARGV[1] .. 'job:' .. id, 'attempts') == token then
    redis.call('ZADD', KEYS[1], deadline, id)
  else
    failed[#failed + 1] = id
  end
end
return failed
