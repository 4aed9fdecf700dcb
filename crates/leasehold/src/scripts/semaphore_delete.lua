-- Delete a semaphore: its permit count and every permit lease (an admin
-- action). Every live waiter is woken to try again; the first attempt makes
-- the semaphore anew with its handle's count. The fence counter stays:
-- fences must never go backwards.
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] waiter key prefix
-- ARGV[1] channel prefix
-- Returns 1 when a semaphore was deleted, 0 when there was none, {-1, kind}
-- when the key holds another kind of lock (left as it is).
local L = lib()
local kind = L.kind_of(KEYS[1])
if kind == 'none' then
  return 0
end
if kind ~= 'semaphore' then
  return {-1, kind}
end
redis.call('DEL', KEYS[1])
for _, w in ipairs(family().live_waiters(KEYS[2], KEYS[3], nil)) do
  L.wake(ARGV[1], w)
end
return 1
