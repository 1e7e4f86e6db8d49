-- gshed: BROKEN on purpose (worker --break drop-paused). An idle consumer "sheds" a paused
-- group's backlog: it pops the head of a paused lane and drops it, row and all left behind,
-- in no set. The paused group's jobs are lost; the history cannot show it (a pop that leases
-- nothing reads as an empty claim), so only the store's own list of the paused lanes at the
-- end, against the history, can: no_loss.
-- KEYS[1] emq:{q}:paused
-- ARGV[1] the queue's base emq:{q}:
-- Returns the dropped id, or false.
local group = redis.call('SRANDMEMBER', KEYS[1])
if not group then
  return false
end
local popped = redis.call('ZPOPMIN', ARGV[1] .. 'g:' .. group .. ':pending')
return popped[1] or false
