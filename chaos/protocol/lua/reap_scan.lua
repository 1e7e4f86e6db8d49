-- MUTANT nonatomic-reap, step 1 of 2: the ids whose lease deadline is at or before the server
-- clock. Nothing moves here; reap_move.lua moves each id in a separate round trip, so by then the
-- lease may have been reaped, re-claimed or completed. It records its `sweep` event (as the
-- sound reap.lua does), so the reaper's cadence is in the history as for the sound protocol.
-- KEYS[1] active  KEYS[2] events
-- ARGV[1] limit  ARGV[2] the reaper's name
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('XADD', KEYS[2], '*', 'type', 'sweep', 'worker', ARGV[2] or '', 'ts', now)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
