-- MUTANT nonatomic-reap, step 1 of 2 (read-only): the ids whose lease deadline is at or before
-- the server clock. Nothing moves and nothing is recorded here; reap_move.lua moves each id in a
-- separate round trip, so by then the lease may have been reaped, re-claimed or completed.
-- KEYS[1] active
-- ARGV[1] limit
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
