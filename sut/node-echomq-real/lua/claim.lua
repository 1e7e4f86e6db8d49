-- claim: lease the first waiting job (EchoMQ's @claim, from its described effects).
-- KEYS[1] emq:{q}:pending, KEYS[2] emq:{q}:active
-- ARGV[1] the rows' prefix emq:{q}:job:, ARGV[2] the lease in ms
-- Returns {} when nothing waits, else {id, payload, attempts}: the raised attempts count is
-- the lease's fencing token. The deadline is on the server's clock.
local first = redis.call('ZPOPMIN', KEYS[1])
if #first == 0 then
  return {}
end
local id = first[1]
local row = ARGV[1] .. id
local attempts = redis.call('HINCRBY', row, 'attempts', 1)
redis.call('HSET', row, 'state', 'active')
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[2]), id)
return {id, redis.call('HGET', row, 'payload'), attempts}
