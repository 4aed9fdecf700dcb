-- Round two of a lock over several masters (Redlock): write the fence the
-- majority agreed on to this master's counter, if this token still holds
-- the lock here. The counter only grows; it keeps the retention TTL every
-- fence counter has (see next_fence in lib.lua).
-- KEYS[1] lock, KEYS[2] fence counter
-- ARGV[1] token, ARGV[2] fence, ARGV[3] fence retention ms
-- Returns 1 when written (or the counter was already at least the fence),
-- 0 when the token does not hold the lock here.
local holder = redis.pcall('GET', KEYS[1])
if type(holder) ~= 'string' or not holds(holder, ARGV[1]) then
  return 0
end
local fence = tonumber(ARGV[2])
if counter_digits(redis.pcall('GET', KEYS[2])) < fence then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
else
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
