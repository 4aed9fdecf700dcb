-- Take a free lock and hand out its fence (Mutex: a free lock goes to
-- whoever asks; waiters queue so that a release wakes only one of them).
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] queue, KEYS[4] waiter key prefix
-- ARGV[1..9] as every acquire script takes them (see lib.lua), with
-- ARGV[9] 'f' for a waiter that has waited long enough to be handed the lock
-- at the next release (it starves otherwise: a releaser that asks again at
-- once wins nearly every race), 'm' to be woken to try;
-- ARGV[10] hand-off lease ms
-- The waiter's record keeps the mode it sent last.
-- Returns the fence, as text, when this attempt took the free lock (the
-- lease is ARGV[2]); {1, fence, lease ms} when an earlier attempt with
-- this token took it; {0, pttl of the holder, last fence (0 unless
-- queueing), the holder's record} when busy, {-1, kind} when the key holds
-- another kind of lock.
-- The fast path (a free lock) makes no closure and no number: each costs
-- the server work on every run.
local now_text = server_text()
local value = ARGV[1] .. ' ' .. now_text .. ' ' .. ARGV[8]
if ARGV[7] == '1' then
  -- Sent before: it may have queued, and others behind it.
  value = value .. WAITED
end
if redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
  if ARGV[7] == '1' then
    lib().leave_queue(KEYS[3], KEYS[4], ARGV[1])
  end
  local _, fence = next_fence(KEYS[2], nil, ARGV[3], now_text)
  return fence
end
local L = lib()
local holder = redis.pcall('GET', KEYS[1])
if type(holder) ~= 'string' then
  local kind = L.kind_of(KEYS[1])
  -- A hash lock with no live lease is removed, and the lock taken.
  if family().drop_stale(KEYS[1], kind)
      and redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
    if ARGV[7] == '1' then
      L.leave_queue(KEYS[3], KEYS[4], ARGV[1])
    end
    return {1, next_fence(KEYS[2], nil, ARGV[3], now_text), tonumber(ARGV[2])}
  end
  return {-1, kind}
end
if ARGV[7] == '1' and holds(holder, ARGV[1]) then
  -- An earlier attempt with this token took it, and its answer was lost;
  -- or a release handed it over with the short hand-off lease: this
  -- attempt sets the lease it asks for.
  L.leave_queue(KEYS[3], KEYS[4], ARGV[1])
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return {1, tonumber(redis.call('GET', KEYS[2])) or -1, redis.call('PTTL', KEYS[1])}
end
if ARGV[4] == '0' then
  return {0, redis.call('PTTL', KEYS[1]), 0, holder}
end
if ARGV[4] == '1' then
  L.enqueue(KEYS[3], KEYS[4], ARGV[1], now_text, ARGV[5], ARGV[10], ARGV[9], '1', ARGV[6], ARGV[8])
end
-- Its release reads the queue.
mark_waited(KEYS[1], holder)
-- The fence counter lets the waiter tell a hand-off after this attempt
-- (a larger fence) from a stale message about one before it.
return {0, redis.call('PTTL', KEYS[1]), tonumber(redis.call('GET', KEYS[2])) or 0, holder}
