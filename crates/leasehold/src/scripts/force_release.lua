-- Remove a lock whoever holds it (an admin action) and wake its first live
-- waiter. The fence counter stays: fences must never go backwards.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] queue, KEYS[4] waiter key prefix
-- ARGV[1] fence retention ms, ARGV[2] channel prefix
-- Returns 1 when a lock was removed, 0 when it was free.
local removed = redis.call('DEL', KEYS[1])
wake_first(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2])
return removed
