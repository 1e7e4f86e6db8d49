-- record(field, value, ...): append a runner event (fault, heal, phase, run metadata) to the
-- history, stamped with the same server clock that scores the leases. Returns {stamp, entry id}:
-- the id of a run's own run event is where its window of a reused stream begins.
-- KEYS[1] events  ARGV: field/value pairs
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local fields = {'XADD', KEYS[1], '*'}
for i = 1, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
fields[#fields + 1] = 'ts'
fields[#fields + 1] = now
local id = redis.call(unpack(fields))
return {now, id}
