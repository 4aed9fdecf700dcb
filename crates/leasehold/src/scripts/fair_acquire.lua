-- Take a fair lock: it goes to the first live waiter, and to a newcomer only
-- when nobody waits. A release hands it to the head of the queue itself
-- (see wake_first in lib.lua); this script also reports such a hand-off.
-- KEYS and ARGV as acquire.lua (ARGV[9] is always 'f'); ARGV[10] is the
-- lease a release hands over.
-- Returns the fence, as text, when this attempt took the free lock (the
-- lease is ARGV[2]); {1, fence, remaining lease ms} when held by a
-- hand-off or an earlier attempt; {0, pttl of the holder
-- (-2 when free but promised to an earlier waiter), last fence, the
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
  -- an attempt whose answer was lost: this attempt sets the lease it asks for.
  L.leave_queue(KEYS[3], KEYS[4], ARGV[1])
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return {1, tonumber(redis.call('GET', KEYS[2])) or -1, redis.call('PTTL', KEYS[1])}
end
if not holder then
  local head = L.first_live(KEYS[3], KEYS[4])
  if not head or head.token == ARGV[1] then
    local now_text = server_text()
    local value = ARGV[1] .. ' ' .. now_text .. ' ' .. ARGV[8]
    if head then
      -- Others may wait behind it.
      value = value .. WAITED
      L.leave_queue(KEYS[3], KEYS[4], ARGV[1])
    end
    redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
    local _, fence = next_fence(KEYS[2], nil, ARGV[3], now_text)
    return fence
  end
end
if ARGV[4] == '0' then
  return {0, redis.call('PTTL', KEYS[1]), 0, holder or ''}
end
if ARGV[4] == '1' then
  L.enqueue(KEYS[3], KEYS[4], ARGV[1], nil, ARGV[5], ARGV[10], 'f', '1', ARGV[6], ARGV[8])
end
if holder then
  -- Its release hands the lock on.
  mark_waited(KEYS[1], holder)
end
-- The fence counter lets the waiter tell a hand-off after this attempt
-- (a larger fence) from a stale message about one before it.
return {0, redis.call('PTTL', KEYS[1]), tonumber(redis.call('GET', KEYS[2])) or 0, holder or ''}
