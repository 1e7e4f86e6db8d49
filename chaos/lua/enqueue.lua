-- enqueue(id, payload): a new job goes to pending, scored by enqueue time on the server clock.
-- KEYS[1] pending  KEYS[2] events
-- ARGV[1] job key prefix  ARGV[2] id  ARGV[3] payload
-- ARGV[4] optional: '0' = no event (benchmarks only: the cost of the evidence; default: record)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local jk = ARGV[1] .. ARGV[2]
if redis.call('EXISTS', jk) == 1 then
  return 0  -- ids are unique per run; a repeat is a caller bug, never a second job
end
redis.call('HSET', jk, 'payload', ARGV[3], 'state', 'pending', 'attempts', 0)
redis.call('ZADD', KEYS[1], now, ARGV[2])
if ARGV[4] ~= '0' then
  redis.call('XADD', KEYS[2], '*', 'type', 'enqueue', 'id', ARGV[2], 'ts', now)
end
return 1
