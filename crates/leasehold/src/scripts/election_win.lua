-- Records the leader of an election once its campaigner holds the lock,
-- and tells the observers.
-- KEYS[1] lock, KEYS[2] leader record
-- ARGV[1] token, ARGV[2] fence, ARGV[3] value, ARGV[4] record ttl ms,
-- ARGV[5] election channel
-- Returns 1 when recorded, 0 when the token no longer holds the lock.
--
-- The record is "fence token value": it is trusted only while the lock is
-- held by that token, so a record left by an earlier leader is never read
-- as the current one.
-- The lock's value starts with its holder's token (see lib.lua).
local holder = redis.pcall('GET', KEYS[1])
if type(holder) ~= 'string' or string.sub(holder, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2] .. ' ' .. ARGV[1] .. ' ' .. ARGV[3], 'PX', ARGV[4])
publish(ARGV[5], ARGV[2])
return 1
