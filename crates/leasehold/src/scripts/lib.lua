-- Shared by every script (prepended to each): the server's clock, fences,
-- and the waiter queue.
--
-- The waiter queue of a lock is a sorted set (token -> arrival time on the
-- server's clock, µs) plus one key per waiter, `<waiters prefix><token>`,
-- holding "hand_off_lease_ms mode channel" (mode 'f' for a waiter that is
-- handed the lock, 'm' for one that is woken to try) and expiring with the
-- waiter's heartbeat. A waiter whose key is gone has died. The sorted set
-- expires with the freshest heartbeat. All of them share the lock's hash tag.

local function server_us()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000000 + tonumber(time[2])
end

-- The next fence: a hybrid logical clock, max(stored + 1, server time in
-- µs), so fences stay monotonic when the counter is lost (restart without
-- persistence, failover, or its retention running out) as long as the server
-- clock does not step back. The counter expires after `retention` ms without
-- an acquisition.
local function next_fence(key, now_us, retention)
  local old = redis.call('SET', key, string.format('%.0f', now_us), 'PX', retention, 'GET')
  local stored = tonumber(old)
  -- Anything leasehold did not write (NaN, infinities, beyond 2^53 where Lua
  -- numbers stop being exact) counts as a lost counter.
  if stored == nil or stored ~= stored or stored < 0 or stored >= 9007199254740992 then
    stored = 0
  end
  stored = math.floor(stored)
  if stored + 1 > now_us then
    redis.call('SET', key, string.format('%.0f', stored + 1), 'PX', retention)
    return stored + 1
  end
  return now_us
end

local function leave_queue(queue, waiters, token)
  redis.call('ZREM', queue, token)
  redis.call('DEL', waiters .. token)
end

-- The first waiter whose heartbeat has not run out, after removing the dead
-- ones before it: token, hand-off lease (ms), mode and channel, or nil.
local function first_live(queue, waiters)
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then
      return nil
    end
    local record = redis.call('GET', waiters .. head)
    if record then
      local hand_off, mode, channel = string.match(record, '^(%d+) (%a) (.*)$')
      if hand_off then
        return head, hand_off, mode, channel
      end
    end
    leave_queue(queue, waiters, head)
  end
end

-- Puts `token` at the back of the queue unless it is in it already, and
-- refreshes its heartbeat. `known` says it may be queued already.
local function enqueue(queue, waiters, token, known, heartbeat, hand_off, mode, channel)
  if known ~= '1' or not redis.call('ZSCORE', queue, token) then
    redis.call('ZADD', queue, 'NX', string.format('%.0f', server_us()), token)
  end
  redis.call('PEXPIRE', queue, heartbeat)
  redis.call('SET', waiters .. token, hand_off .. ' ' .. mode .. ' ' .. channel, 'PX', heartbeat)
end

-- Wakes the first live waiter of a free lock: a fair waiter ('f') is handed
-- the lock with its fence, any other is told to try.
local function wake_first(lock, fence_key, queue, waiters, retention, channels)
  local head, hand_off, mode, channel = first_live(queue, waiters)
  if not head then
    return
  end
  -- pcall: an ACL user without access to the channel still releases; the
  -- waiter then learns on its own timer.
  if mode == 'f' then
    redis.call('SET', lock, head, 'PX', hand_off)
    leave_queue(queue, waiters, head)
    local fence = next_fence(fence_key, server_us(), retention)
    redis.pcall('PUBLISH', channels .. channel, string.format('%s %.0f', head, fence))
  else
    redis.pcall('PUBLISH', channels .. channel, head)
  end
end

