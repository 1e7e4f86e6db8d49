-- BROKEN ON PURPOSE (--break resurrecting-extend): extend_locks.lua without its fence. Every
-- id given is written back into active, whoever holds it now and whether or not it still
-- exists: a renewal from a holder whose lease was reaped and re-claimed, or whose job was
-- completed, resurrects it.
-- KEYS[1] emq:{q}:active
-- ARGV[1] the queue's base emq:{q}:, ARGV[2] the lease in ms, then id, token, id, token, ...
local clock = redis.call('TIME')
local deadline = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  + tonumber(ARGV[2])
for i = 3, #ARGV - 1, 2 do
  redis.call('ZADD', KEYS[1], deadline, ARGV[i])
end
return {}
