-- Remove a lock whoever holds it (an admin action) and wake its waiters;
-- the lock is left free (a fair lock is not handed to its first waiter).
-- The fence counter stays: fences must never go backwards; a semaphore
-- keeps its permit count. A key that is no lock (a hash without a kind, a
-- list, ...) is left as it is: leasehold overwrites nothing it did not write.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] queue, KEYS[4] waiter key prefix,
-- KEYS[5] release memory prefix: a removed Mutex's or FairMutex's token is
-- marked there as removed by force for a minute (longer than any holder's
-- release is sent again for), so that its holder's release, sent again
-- after a compare-and-delete that got no answer, does not take this removal
-- for its own (see release.lua)
-- ARGV[1] fence retention ms, ARGV[2] channel prefix, ARGV[3] (optional)
-- 'r' or 'w': of a read-write lock, remove the readers alone, or the
-- writer alone, and keep the other side's leases
-- Returns 1 when a lock (or, with ARGV[3], a lease of that side) was
-- removed, 0 when there was none, {-1, Redis type} when the key is no
-- lock, {-2, kind} when ARGV[3] is given and the lock is another kind.
local L = lib()
local F = family()
local kind = L.kind_of(KEYS[1])
local only = ARGV[3]
if only == '' then
  only = nil
end
if only and kind ~= 'rwlock' then
  if kind == 'none' then
    return 0
  end
  if kind == 'mutex' or kind == 'reentrant' or kind == 'semaphore' then
    return {-2, kind}
  end
  return {-1, redis.call('TYPE', KEYS[1])['ok']}
end
if kind == 'none' or kind == 'mutex' then
  local value = kind == 'mutex' and redis.call('GET', KEYS[1])
  local removed = redis.call('DEL', KEYS[1])
  if value then
    watched_end(KEYS[1], KEYS[2], ARGV[2], 'f', nil, value)
    redis.call('SET', KEYS[5] .. string.match(value, '^[^ \31]*'), 'f', 'PX', 60000)
  end
  -- The lock is left free: the first waiter is woken to try, never handed
  -- the lock blind (it may have died within its heartbeat).
  local head = L.first_live(KEYS[3], KEYS[4])
  if head and (head.mode == 'r' or head.mode == 'w') then
    F.wake_hash('rwlock', KEYS[1], KEYS[3], KEYS[4], ARGV[2], {})
  elseif head then
    L.wake(ARGV[2], head)
  end
  return removed
end
if kind ~= 'reentrant' and kind ~= 'rwlock' and kind ~= 'semaphore' then
  return {-1, redis.call('TYPE', KEYS[1])['ok']}
end
local now = math.floor(server_us() / 1000)
local live = F.live_holders(KEYS[1], now)
local removed, left = 0, {}
for _, e in ipairs(live) do
  if not only or e.mode == only then
    redis.call('HDEL', KEYS[1], 'h:' .. e.token)
    watched_end(KEYS[1], KEYS[2], ARGV[2], 'f', e.fence, e.acquired)
    removed = removed + 1
  end
end
if only and removed < #live then
  -- Read again: the reentrant level markers of the removed leases go too.
  left = F.live_holders(KEYS[1], now)
end
F.settle(KEYS[1], left, now, ARGV[1])
F.wake_hash(kind, KEYS[1], KEYS[3], KEYS[4], ARGV[2], left)
return removed > 0 and 1 or 0
