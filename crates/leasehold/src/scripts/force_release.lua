-- Remove a lock whoever holds it (an admin action) and wake its waiters.
-- The fence counter stays: fences must never go backwards.
-- KEYS[1] lock, KEYS[2] notification channel
-- Returns 1 when a lock was removed, 0 when it was free.
local removed = redis.call('DEL', KEYS[1])
-- pcall: an ACL user without access to the channel still releases; its
-- waiters then wake on their timers.
redis.pcall('PUBLISH', KEYS[2], 'released')
return removed
