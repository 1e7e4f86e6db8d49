-- gclaim_paused: BROKEN on purpose (worker --break paused-claims). With nothing on the ring, it
-- serves a paused group's lane anyway ("an idle consumer may as well help", within the
-- group's limit): the pause's promise that a paused group's jobs wait is broken, and only
-- paused_group sees it.
-- KEYS[1] emq:{q}:ring, KEYS[2] emq:{q}:active, KEYS[3] emq:{q}:paused
-- ARGV[1] the queue's base emq:{q}:, ARGV[2] the lease in ms
-- Returns {} or {id, payload, attempts, group}, as gclaim.
local group = redis.call('LMOVE', KEYS[1], KEYS[1], 'LEFT', 'RIGHT')
if not group then
  group = redis.call('SRANDMEMBER', KEYS[3])
  if not group then
    return {}
  end
  local limit = redis.call('HGET', ARGV[1] .. 'glimit', group)
  if limit and tonumber(redis.call('HGET', ARGV[1] .. 'gactive', group) or '0') >= tonumber(limit) then
    return {} -- (it keeps the limit: the pause is all it breaks)
  end
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
local live = redis.call('HINCRBY', ARGV[1] .. 'gactive', group, 1)
local limit = redis.call('HGET', ARGV[1] .. 'glimit', group)
if (limit and live >= tonumber(limit)) or redis.call('ZCARD', lane) == 0 then
  redis.call('LREM', KEYS[1], 0, group)
end
return {id, redis.call('HGET', row, 'payload'), attempts, group}
