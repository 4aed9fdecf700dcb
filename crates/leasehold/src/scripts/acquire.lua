-- Take a free lock and hand out its fence (Mutex: a free lock goes to
-- whoever asks; waiters queue so that a release wakes only one of them).
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] queue, KEYS[4] waiter key prefix
-- ARGV[1..9] as every acquire script takes them (see lib.lua), with
-- ARGV[9] 'f' for a waiter that has waited long enough to be handed the lock
-- at the next release (it starves otherwise: a releaser that asks again at
-- once wins nearly every race), 'm' to be woken to try;
-- ARGV[10] hand-off lease ms, ARGV[11] '1' when a busy answer is to carry
-- the last fence (a waiter that takes a hand-off from its message)
-- The waiter's record keeps the mode it sent last.
-- Returns the fence, as text, when this attempt took the free lock (the
-- lease is ARGV[2]) with an unmarked value (see take_fence in lib.lua);
-- {1, fence, lease ms} when it took it otherwise, or an earlier attempt
-- with this token took it; {0, pttl of the holder, last fence (0 unless
-- queueing), the holder's record} when busy, {-1, kind} when the key holds
-- another kind of lock.
-- The fast path (a free lock) makes no closure and no number: each costs
-- the server work on every run. A token sent before reads the lock first:
-- it is mostly queued behind a holder, or handed the lock.
local sent_before = ARGV[7] == '1'
-- The server's clock as the first SET read it: a newcomer that queues
-- arrives then.
local holder, arrived
if not sent_before then
  local now_text = server_text()
  arrived = now_text
  local value = ARGV[1] .. ' ' .. now_text .. ' ' .. ARGV[8]
  if SET_NX_GET then
    -- The holder, when busy, without a GET (an error for another type).
    holder = redis.pcall('SET', KEYS[1], value, 'NX', 'PX', ARGV[2], 'GET')
    if not holder then
      return take_fence(KEYS[1], value, KEYS[2], ARGV[3], now_text, ARGV[2])
    end
  elseif redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
    return take_fence(KEYS[1], value, KEYS[2], ARGV[3], now_text, ARGV[2])
  end
end
local L = lib()
if holder == nil then
  holder = redis.pcall('GET', KEYS[1])
end
if not holder then
  -- Free, and this token was sent before: it may have queued, and others
  -- behind it.
  local fence_us, fence = next_fence(KEYS[2], nil, ARGV[3], server_text())
  redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. fence .. ' ' .. ARGV[8] .. WAITED, 'PX', ARGV[2])
  L.leave_queue(KEYS[3], KEYS[4], ARGV[1])
  return {1, fence_us or tonumber(fence), tonumber(ARGV[2])}
end
if type(holder) ~= 'string' then
  local kind = L.kind_of(KEYS[1])
  local now_text = server_text()
  local value = ARGV[1] .. ' ' .. now_text .. ' ' .. ARGV[8]
  if sent_before then
    value = value .. WAITED
  end
  -- A hash lock with no live lease is removed, and the lock taken.
  if family().drop_stale(KEYS[1], kind)
      and redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
    if sent_before then
      L.leave_queue(KEYS[3], KEYS[4], ARGV[1])
    end
    local fence_us, fence, waiting = next_fence(KEYS[2], nil, ARGV[3], now_text)
    fence_value(KEYS[1], value, now_text, fence, waiting)
    return {1, fence_us or tonumber(fence), tonumber(ARGV[2])}
  end
  return {-1, kind}
end
if holds(holder, ARGV[1]) then
  -- An earlier attempt with this token took it, and its answer was lost
  -- (that attempt left the queue; or this request took it on a master that
  -- then handed over to this one); or a release handed it over with the
  -- short hand-off lease (and took it out of the queue): this attempt sets
  -- the lease it asks for.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, held_fence(holder, KEYS[2]), tonumber(ARGV[2])}
end
if ARGV[4] == '0' then
  return {0, redis.call('PTTL', KEYS[1]), 0, holder}
end
if ARGV[4] == '1' or ARGV[4] == '3' then
  -- Queued before, for a hand-off, and out of the queue: handed the lock,
  -- and the hand-off ran out before this attempt. Back to the front.
  L.enqueue(KEYS[3], KEYS[4], ARGV[1], arrived, ARGV[5], ARGV[10], ARGV[9], '1', ARGV[6],
    ARGV[8], ARGV[4] == '3' and ARGV[9] == 'f')
elseif ARGV[9] == 'f' and not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  -- As above, found by an attempt that does not refresh.
  L.requeue(KEYS[3], KEYS[4], ARGV[1], ARGV[5], ARGV[10] .. ' f 1 ' .. ARGV[6] .. ' ' .. ARGV[8])
end
-- Its release reads the queue.
mark_waited(KEYS[1], holder)
-- The fence counter lets the waiter tell a hand-off after this attempt
-- (a larger fence) from a stale message about one before it: only a
-- waiter that takes a hand-off from its message asks for it (ARGV[11]).
local last_fence = 0
if ARGV[11] == '1' then
  last_fence = fence_of(redis.call('GET', KEYS[2])) or 0
end
return {0, redis.call('PTTL', KEYS[1]), last_fence, holder}
