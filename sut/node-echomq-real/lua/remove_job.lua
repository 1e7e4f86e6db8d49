-- remove_job: a user removes one job (EchoMQ's @remove_job, from its described effects): out
-- of pending, active, schedule and dead, its row and logs deleted, refused while a worker's
-- EchoMQ.Locks marker (<row>:lock) says it is held. A grouped job's lane is left as it is, as
-- EchoMQ's does.
-- KEYS[1] the row, KEYS[2] pending, KEYS[3] active, KEYS[4] schedule, KEYS[5] dead
-- ARGV[1] the id
-- Returns 1; -1 when the row is gone; an EMQLOCK error (nothing written) for a held job.
local row = KEYS[1]
if redis.call('EXISTS', row) == 0 then
  return -1
end
if redis.call('EXISTS', row .. ':lock') == 1 then
  return redis.error_reply('EMQLOCK job is locked')
end
for i = 2, 5 do
  redis.call('ZREM', KEYS[i], ARGV[1])
end
redis.call('DEL', row, row .. ':logs')
return 1
