-- Release a lock held by this token and wake its waiters.
-- KEYS[1] lock, KEYS[2] notification channel
-- ARGV[1] token
-- Returns 1 when released, 0 when the token did not hold the lock.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
-- pcall: an ACL user without access to the channel still releases; its
-- waiters then wake on their timers.
redis.pcall('PUBLISH', KEYS[2], 'released')
return 1
