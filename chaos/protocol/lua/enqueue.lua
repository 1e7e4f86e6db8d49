-- enqueue(id, payload): a new job goes to pending, scored by enqueue time on the server clock.
-- KEYS[1] pending  KEYS[2] events
-- ARGV[1] job key prefix  ARGV[2] id  ARGV[3] payload
-- ARGV[4] optional: '0' = no event (benchmarks only: the cost of the evidence; default: record)
-- ARGV[5] optional: the job's kind (e.g. 'poison'), stored on the job and named in its event so
-- the checker can tell the kinds apart
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local jk = ARGV[1] .. ARGV[2]
if redis.call('EXISTS', jk) == 1 then
  return 0  -- ids are unique per run; a repeat is a caller bug, never a second job
end
local kind = ARGV[5] or ''
redis.call('HSET', jk, 'payload', ARGV[3], 'state', 'pending', 'attempts', 0)
redis.call('ZADD', KEYS[1], now, ARGV[2])
if kind ~= '' then
  redis.call('HSET', jk, 'kind', kind)
end
if ARGV[4] ~= '0' and kind ~= '' then
  redis.call('XADD', KEYS[2], '*', 'type', 'enqueue', 'id', ARGV[2], 'kind', kind, 'ts', now)
elseif ARGV[4] ~= '0' then
  redis.call('XADD', KEYS[2], '*', 'type', 'enqueue', 'id', ARGV[2], 'ts', now)
end
return 1
