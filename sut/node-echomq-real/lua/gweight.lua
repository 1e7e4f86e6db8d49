-- gweight: set a group's weight, how many of its lane's heads one weighted claim may lease at
-- once (EchoMQ.Lanes' weight, from its described effects); it never changes whether the
-- group may be served, so the ring is left alone.
-- KEYS[1] emq:{q}:gweight
-- ARGV[1] the group, ARGV[2] the weight (>= 1)
-- Returns 1.
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
