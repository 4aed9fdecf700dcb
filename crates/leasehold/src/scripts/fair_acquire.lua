-- Take a fair lock: it goes to the first live waiter, and to a newcomer only
-- when nobody waits. A release hands it to the head of the queue itself
-- (see wake_first in lib.lua); this script also reports such a hand-off.
-- KEYS and ARGV as acquire.lua (ARGV[9] is always 'f'); ARGV[10] is the
-- lease a release hands over, ARGV[11] '1' when a busy answer is to carry
-- the last fence.
-- Returns the fence, as text, when this attempt took the free lock (the
-- lease is ARGV[2]) with an unmarked value (see take_fence in lib.lua);
-- {1, fence, lease ms} when it took it otherwise, or held it by a hand-off
-- or an earlier attempt; {0, pttl of the holder
-- (-2 when free but promised to an earlier waiter), last fence (0 without
-- ARGV[11]), the
-- holder's record} when busy, {-1, kind} when the key holds another kind
-- of lock.
local L = lib()
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then
  local kind = L.kind_of(KEYS[1])
  if not family().drop_stale(KEYS[1], kind) then
    return {-1, kind}
  end
  holder = false
end
if holder and holds(holder, ARGV[1]) then
  -- Handed over by a release (with the short hand-off lease), or taken by
  -- an attempt whose answer was lost: either took it out of the queue.
  -- This attempt sets the lease it asks for.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, held_fence(holder, KEYS[2]), tonumber(ARGV[2])}
end
if not holder then
  local head = L.first_live(KEYS[3], KEYS[4])
  -- Queued, but out of the queue: handed the lock, and the hand-off ran
  -- out before this attempt. Its place was first: it takes the lock still.
  -- (A hand-off leaves the waiter's key to its heartbeat: one whose
  -- heartbeat ran out has none.)
  local lapsed = head and head.token ~= ARGV[1] and (ARGV[4] == '2' or ARGV[4] == '3')
    and not redis.call('ZSCORE', KEYS[3], ARGV[1])
    and redis.call('EXISTS', KEYS[4] .. ARGV[1]) == 1
  if not head or head.token == ARGV[1] or lapsed then
    local now_text = server_text()
    if head then
      -- Others may wait behind it. Its acquisition time is its fence (see
      -- fence_value).
      local fence_us, fence = next_fence(KEYS[2], nil, ARGV[3], now_text)
      redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. fence .. ' ' .. ARGV[8] .. WAITED, 'PX',
        ARGV[2])
      L.leave_queue(KEYS[3], KEYS[4], ARGV[1])
      return {1, fence_us or tonumber(fence), tonumber(ARGV[2])}
    end
    local value = ARGV[1] .. ' ' .. now_text .. ' ' .. ARGV[8]
    redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
    return take_fence(KEYS[1], value, KEYS[2], ARGV[3], now_text, ARGV[2])
  end
end
if ARGV[4] == '0' then
  return {0, redis.call('PTTL', KEYS[1]), 0, holder or ''}
end
if ARGV[4] == '1' or ARGV[4] == '3' then
  -- Queued before, and out of the queue: handed the lock, and the hand-off
  -- ran out before this attempt. Its place was first: newcomers do not
  -- pass it.
  L.enqueue(KEYS[3], KEYS[4], ARGV[1], nil, ARGV[5], ARGV[10], 'f', '1', ARGV[6], ARGV[8],
    ARGV[4] == '3')
elseif not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  -- As above, found by an attempt that does not refresh.
  L.requeue(KEYS[3], KEYS[4], ARGV[1], ARGV[5], ARGV[10] .. ' f 1 ' .. ARGV[6] .. ' ' .. ARGV[8])
end
if holder then
  -- Its release hands the lock on.
  mark_waited(KEYS[1], holder)
end
-- The fence counter lets the waiter tell a hand-off after this attempt
-- (a larger fence) from a stale message about one before it: only a
-- waiter that takes a hand-off from its message asks for it (ARGV[11]).
local last_fence = 0
if ARGV[11] == '1' then
  last_fence = fence_of(redis.call('GET', KEYS[2])) or 0
end
return {0, redis.call('PTTL', KEYS[1]), last_fence, holder or ''}
