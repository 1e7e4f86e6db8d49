-- gclaim_unlimited: gclaim.lua with one fault on purpose (worker --break unlimited-lanes): it
-- ignores the group's limit of live leases.
-- KEYS[1] emq:{q}:ring, KEYS[2] emq:{q}:active
-- ARGV[1] the queue's base emq:{q}:, ARGV[2] the lease in ms
-- Returns {} when no group can be served, else {id, payload, attempts, group}: the raised
-- attempts count is the lease's fencing token; the deadline is on the server's clock. A group
-- leaves the ring once its lane is empty or its live leases reach its limit.
local group = redis.call('LMOVE', KEYS[1], KEYS[1], 'LEFT', 'RIGHT')
if not group then
  return {}
end
local lane = ARGV[1] .. 'g:' .. group .. ':pending'
local first = redis.call('ZPOPMIN', lane)
if #first == 0 then
  redis.call('LREM', KEYS[1], 0, group)
  return {}
end
local id = first[1]
local row = ARGV[1] .. 'job:' .. id
local attempts = redis.call('HINCRBY', row, 'attempts', 1)
redis.call('HSET', row, 'state', 'active')
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[2]), id)
-- BROKEN (worker --break unlimited-lanes): the group's live leases are counted, but its limit
-- is never read, so the group stays on the ring at its cap and is served past it.
redis.call('HINCRBY', ARGV[1] .. 'gactive', group, 1)
if redis.call('ZCARD', lane) == 0 then
  redis.call('LREM', KEYS[1], 0, group)
end
return {id, redis.call('HGET', row, 'payload'), attempts, group}
