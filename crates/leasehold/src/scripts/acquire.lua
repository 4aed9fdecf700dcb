-- Take a free lock and hand out its fence.
-- KEYS[1] lock, KEYS[2] fence counter
-- ARGV[1] token, ARGV[2] lease in milliseconds
-- Returns {1, fence} when taken, {0, pttl of the holder} when busy.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('PTTL', KEYS[1])}
end
-- The fence is a hybrid logical clock: it stays monotonic even when the
-- counter is lost (restart without persistence, failover to a stale replica),
-- as long as the server clock does not step back.
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local stored = tonumber(redis.call('GET', KEYS[2])) or 0
-- Anything leasehold did not write (NaN, infinities, beyond 2^53 where Lua
-- numbers stop being exact) counts as a lost counter.
if stored ~= stored or stored < 0 or stored >= 9007199254740992 then
  stored = 0
end
local fence = math.max(math.floor(stored) + 1, now_us)
redis.call('SET', KEYS[2], string.format('%.0f', fence))
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, fence}
