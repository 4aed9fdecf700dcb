-- Release a lock held by this token, or take a waiter that gives up out of
-- the queue; if that leaves the lock free, wake its first live waiter (a
-- FairMutex waiter is handed the lock).
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] queue, KEYS[4] waiter key prefix
-- ARGV[1] token, ARGV[2] '1' when this token may be queued,
-- ARGV[3] fence retention ms, ARGV[4] channel prefix,
-- ARGV[5] ms to keep the lock held instead (its hold-at-least is not over), or 0
-- Returns 1 when released, 2 when kept until ARGV[5] runs out (nobody is
-- woken: waiters take it when it expires), 0 when the token did not hold the lock.
local released = 0
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  if tonumber(ARGV[5]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[5])
    return 2
  end
  redis.call('DEL', KEYS[1])
  released = 1
elseif ARGV[2] == '1' then
  leave_queue(KEYS[3], KEYS[4], ARGV[1])
  if holder then
    return 0
  end
else
  return 0
end
wake_first(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[4])
return released
