-- Set a semaphore's permit count (an admin action) and wake the waiters
-- that now fit. Leases held beyond a lowered count run on until released.
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] waiter key prefix
-- ARGV[1] permits, ARGV[2] retention ms (how long the count outlives the
-- last lease), ARGV[3] channel prefix
-- Returns {1} when set, {-1, kind} when the key holds another kind of lock.
local L = lib()
local F = family()
local kind = L.kind_of(KEYS[1])
if kind ~= 'none' and kind ~= 'semaphore' and not F.drop_stale(KEYS[1], kind) then
  return {-1, kind}
end
redis.call('HSET', KEYS[1], 'kind', 'semaphore', 'permits', ARGV[1])
local now = math.floor(server_us() / 1000)
local live = F.live_holders(KEYS[1], now)
F.settle(KEYS[1], live, now, ARGV[2])
F.wake_hash('semaphore', KEYS[1], KEYS[2], KEYS[3], ARGV[3], live)
return {1}
