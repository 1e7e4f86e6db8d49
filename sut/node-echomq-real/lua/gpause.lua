-- gpause: pause a group (EchoMQ.Lanes' pause, from its described effects): its lane keeps its
-- jobs, off the ring, so no grouped claim serves it until it is resumed.
-- KEYS[1] emq:{q}:paused, KEYS[2] emq:{q}:ring
-- ARGV[1] the group
-- Returns 1.
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('LREM', KEYS[2], 0, ARGV[1])
return 1
