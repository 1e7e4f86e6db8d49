-- gwclaim: the weighted grouped claim (EchoMQ.Lanes' weighted rotation, from its described
-- effects): turn the ring one step, then lease up to the group's weight of its lane's heads in
-- this one turn, never past its limit of live leases; all on one deadline.
-- KEYS[1] emq:{q}:ring, KEYS[2] emq:{q}:active
-- ARGV[1] the queue's base emq:{q}:, ARGV[2] the lease in ms
-- Returns {} when nothing can be served, else a list of {id, payload, attempts, group}.
local group = redis.call('LMOVE', KEYS[1], KEYS[1], 'LEFT', 'RIGHT')
if not group then
  return {}
end
local base = ARGV[1]
local lane = base .. 'g:' .. group .. ':pending'
local depth = redis.call('ZCARD', lane)
local take = math.max(1, tonumber(redis.call('HGET', base .. 'gweight', group) or '1'))
take = math.min(take, depth)
local limit = redis.call('HGET', base .. 'glimit', group)
if limit then
  take = math.min(take, tonumber(limit) - tonumber(redis.call('HGET', base .. 'gactive', group) or '0'))
end
if take <= 0 then
  redis.call('LREM', KEYS[1], 0, group)
  return {}
end
local clock = redis.call('TIME')
local deadline = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) + tonumber(ARGV[2])
local served = {}
for _ = 1, take do
  local id = redis.call('ZPOPMIN', lane)[1]
  local row = base .. 'job:' .. id
  local attempts = redis.call('HINCRBY', row, 'attempts', 1)
  redis.call('HSET', row, 'state', 'active')
  redis.call('ZADD', KEYS[2], deadline, id)
  served[#served + 1] = {id, redis.call('HGET', row, 'payload'), attempts, group}
end
local live = redis.call('HINCRBY', base .. 'gactive', group, take)
if (limit and live >= tonumber(limit)) or redis.call('ZCARD', lane) == 0 then
  redis.call('LREM', KEYS[1], 0, group)
end
return served
