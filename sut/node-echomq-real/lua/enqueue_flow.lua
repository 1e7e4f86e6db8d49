-- enqueue_flow: a flow, a parent and its children in one atomic step (EchoMQ.Flows' same-queue
-- add, from its described effects). The children are claimable at once; the parent is held
-- out of pending (its row's state awaiting_children) with its count of children left in
-- <row>:dependencies, released by the complete of its last child (complete.lua's fan-in).
-- KEYS[1] the parent's row, KEYS[2] the parent's :dependencies, KEYS[3] emq:{q}:pending,
-- KEYS[4..] the children's rows, one per (id, payload) pair of ARGV
-- ARGV[1] the parent's id, ARGV[2] its payload, ARGV[3] the count of children N, then N pairs
-- (child id, child payload), then optionally the children's policy toward the parent should
-- one of them die ('fail': the parent fails with it, EchoMQ's default; 'ignore': it counts as
-- settled, ignore_dependency_on_failure), kept on each child's row as parent_policy
-- Returns N.
local n = tonumber(ARGV[3])
for i = 1, n do
  if string.sub(ARGV[2 + 2 * i], 1, 3) ~= 'JOB' or string.sub(ARGV[1], 1, 3) ~= 'JOB' then
    return redis.error_reply('EMQKIND job id must be JOB-namespaced')
  end
end
local policy = ARGV[4 + 2 * n]
for i = 1, n do
  redis.call('HSET', KEYS[3 + i], 'state', 'pending', 'attempts', '0',
    'payload', ARGV[3 + 2 * i], 'parent', ARGV[1])
  if policy and policy ~= '' then
    redis.call('HSET', KEYS[3 + i], 'parent_policy', policy)
  end
  redis.call('ZADD', KEYS[3], 0, ARGV[2 + 2 * i])
end
redis.call('HSET', KEYS[1], 'state', 'awaiting_children', 'attempts', '0', 'payload', ARGV[2])
redis.call('SET', KEYS[2], n)
return n
