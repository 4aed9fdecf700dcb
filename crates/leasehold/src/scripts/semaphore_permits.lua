-- Set a semaphore's permit count (an admin action) and wake the waiters
-- that now fit. Leases held beyond a lowered count run on until released.
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] waiter key prefix
-- ARGV[1] permits, ARGV[2] retention ms (how long the count outlives the
-- last lease), ARGV[3] channel prefix, ARGV[4] (optional) '1' to set the
-- count only if none is set (none stored, or one whose lifetime ended),
-- ARGV[5] (optional) the count's lifetime ms, for a count set by ARGV[4]:
-- the count goes at its end, or with the last lease when one runs past it
-- (the next acquisition sets it again), and a count set without one keeps
-- no lifetime
-- Returns {1} when set, {0} when ARGV[4] found a count set, {-1, kind}
-- when the key holds another kind of lock.
local L = lib()
local F = family()
local kind = L.kind_of(KEYS[1])
if kind ~= 'none' and kind ~= 'semaphore' and not F.drop_stale(KEYS[1], kind) then
  return {-1, kind}
end
local now = math.floor(server_us() / 1000)
if ARGV[4] == '1' and kind == 'semaphore' then
  local ends = tonumber(redis.call('HGET', KEYS[1], 'd'))
  if not ends or ends > now then
    return {0}
  end
end
redis.call('HSET', KEYS[1], 'kind', 'semaphore', 'permits', ARGV[1])
local lifetime = tonumber(ARGV[5] or '')
if lifetime and lifetime > 0 then
  redis.call('HSET', KEYS[1], 'd', string.format('%.0f', now + lifetime))
else
  redis.call('HDEL', KEYS[1], 'd')
end
local live = F.live_holders(KEYS[1], now)
F.settle(KEYS[1], live, now, ARGV[2])
F.wake_hash('semaphore', KEYS[1], KEYS[2], KEYS[3], ARGV[3], live)
return {1}
