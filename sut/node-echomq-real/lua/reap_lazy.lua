-- BROKEN ON PURPOSE (--break lazy-reaper): reap.lua reading active's score as the time of the
-- claim rather than the lease's deadline, so it takes only leases older than a lease past it:
-- every lapsed lease comes back a whole lease late.
-- KEYS[1] emq:{q}:active, KEYS[2] emq:{q}:pending
-- ARGV[1] the queue's base emq:{q}:, ARGV[2] the lease in ms
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local cutoff = now_ms - tonumber(ARGV[2])
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff, 'LIMIT', 0, 100)
for _, id in ipairs(lapsed) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('HGET', ARGV[1] .. 'job:' .. id, 'group') -- flat jobs only: see complete.lua
  redis.call('ZADD', KEYS[2], 0, id)
  redis.call('HSET', ARGV[1] .. 'job:' .. id, 'state', 'pending')
end
return #lapsed
