-- Take a free Mutex without queueing: the first attempt of a try, or of a
-- wait that is not listening yet. The fast path of acquire.lua, sent with
-- only what it uses: every key and argument costs the server work.
-- KEYS[1] lock, KEYS[2] fence counter
-- ARGV[1] token, ARGV[2] lease ms, ARGV[3] fence retention ms,
-- ARGV[4] the holder's identity
-- Returns as acquire.lua does: the fence, as text (see take_fence in
-- lib.lua), or {1, fence, lease ms}, when taken or held by this token
-- already; {0, pttl of
-- the holder, 0, the holder's record} when busy; {-1, kind} when the key
-- holds another kind of lock.
local now_text = server_text()
local value = ARGV[1] .. ' ' .. now_text .. ' ' .. ARGV[4]
if redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
  return take_fence(KEYS[1], value, KEYS[2], ARGV[3], now_text, ARGV[2])
end
local holder = redis.pcall('GET', KEYS[1])
if type(holder) ~= 'string' then
  local kind = lib().kind_of(KEYS[1])
  -- A hash lock with no live lease is removed, and the lock taken.
  if family().drop_stale(KEYS[1], kind)
      and redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
    return take_fence(KEYS[1], value, KEYS[2], ARGV[3], now_text, ARGV[2])
  end
  return {-1, kind}
end
if holds(holder, ARGV[1]) then
  -- This request took it on a master that then handed over to this one
  -- (its answer was lost to the failover): it holds it.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, held_fence(holder, KEYS[2]), tonumber(ARGV[2])}
end
return {0, redis.call('PTTL', KEYS[1]), 0, holder}
