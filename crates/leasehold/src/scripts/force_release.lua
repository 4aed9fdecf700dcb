-- Remove a lock whoever holds it (an admin action) and wake its waiters.
-- The fence counter stays: fences must never go backwards; a semaphore
-- keeps its permit count. A key that is no lock (a hash without a kind, a
-- list, ...) is left as it is: leasehold overwrites nothing it did not write.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] queue, KEYS[4] waiter key prefix
-- ARGV[1] fence retention ms, ARGV[2] channel prefix
-- Returns 1 when a lock was removed, 0 when it was free, {-1, Redis type}
-- when the key is no lock.
local L = lib()
local F = family()
local kind = L.kind_of(KEYS[1])
if kind == 'none' or kind == 'mutex' then
  local removed = redis.call('DEL', KEYS[1])
  F.wake_free(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2])
  return removed
end
if kind ~= 'reentrant' and kind ~= 'rwlock' and kind ~= 'semaphore' then
  return {-1, redis.call('TYPE', KEYS[1])['ok']}
end
local now = math.floor(server_us() / 1000)
local live = F.live_holders(KEYS[1], now)
for _, e in ipairs(live) do
  redis.call('HDEL', KEYS[1], 'h:' .. e.token)
end
F.settle(KEYS[1], {}, now, ARGV[1])
F.wake_hash(kind, KEYS[1], KEYS[3], KEYS[4], ARGV[2], {})
return #live > 0 and 1 or 0
