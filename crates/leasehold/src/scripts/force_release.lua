-- Remove a lock whoever holds it (an admin action) and wake its waiters.
-- The fence counter stays: fences must never go backwards.
-- KEYS[1] lock, KEYS[2] notification channel
-- Returns 1 when a lock was removed, 0 when it was free.
local removed = redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], 'released')
return removed
