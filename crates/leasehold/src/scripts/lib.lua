-- Shared by every script (prepended to each): the server's clock, fences,
-- lock records, and the waiter queue.
--
-- A Mutex or FairMutex is a string: "<token> <acquired µs> <identity>",
-- where the identity is "<pid> <host> <client name>" (a bare token, as
-- written by hand, counts too). The other primitives keep one hash per
-- lock: `kind`, for a semaphore `permits`, and one field per held lease,
-- `h:<token>` = "<expiry ms> <mode> <owner> <permits> <fence> <acquired µs>
-- <identity>"; every lease has its own expiry on the server's clock, and
-- the key expires with the last of them.
--
-- The waiter queue of a lock is a sorted set (token -> arrival time on the
-- server's clock, µs) plus one key per waiter, `<waiters prefix><token>`,
-- holding "hand_off_lease_ms mode want client identity" and expiring with
-- the waiter's heartbeat. Mode 'f' is a waiter that is handed the lock, 'm'
-- one that is woken to try; the hash primitives queue with their own mode
-- ('x' reentrant, 'r' reader, 'w' writer, 's' semaphore) and are woken to
-- try. A waiter whose key is gone has died. The sorted set expires with the
-- freshest heartbeat. All of them share the lock's hash tag.

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

-- Whether a string lock's value is held by `token`.
local function holds(value, token)
  return value == token or string.sub(value, 1, #token + 1) == token .. ' '
end

-- What kind of lock `key` holds: 'none', 'mutex', a hash primitive's kind,
-- or the Redis type of a key leasehold did not write.
local function kind_of(key)
  local t = redis.call('TYPE', key)['ok']
  if t == 'string' then
    return 'mutex'
  elseif t == 'hash' then
    return redis.call('HGET', key, 'kind') or 'hash'
  end
  return t
end

local function leave_queue(queue, waiters, token)
  redis.call('ZREM', queue, token)
  redis.call('DEL', waiters .. token)
end

-- A waiter's record, or nil when its heartbeat ran out.
local function waiter(waiters, token)
  local record = redis.call('GET', waiters .. token)
  if not record then
    return nil
  end
  local hand_off, mode, want, client, identity =
    string.match(record, '^(%d+) (%a) (%d+) (%S+) ?(.*)$')
  if not hand_off then
    return nil
  end
  return {token = token, hand_off = hand_off, mode = mode, want = tonumber(want),
    client = client, identity = identity}
end

-- The first waiter whose heartbeat has not run out, after removing the dead
-- ones before it, or nil.
local function first_live(queue, waiters)
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then
      return nil
    end
    local record = waiter(waiters, head)
    if record then
      return record
    end
    leave_queue(queue, waiters, head)
  end
end

-- The live waiters in arrival order, after removing the dead ones; only
-- those that arrived before `token` when it is queued.
local function live_waiters(queue, waiters, token)
  local tokens
  local rank = token and redis.call('ZRANK', queue, token)
  if rank then
    tokens = rank > 0 and redis.call('ZRANGE', queue, 0, rank - 1) or {}
  else
    tokens = redis.call('ZRANGE', queue, 0, -1)
  end
  local live = {}
  for _, t in ipairs(tokens) do
    local record = waiter(waiters, t)
    if record then
      live[#live + 1] = record
    else
      leave_queue(queue, waiters, t)
    end
  end
  return live
end

-- Puts `token` at the back of the queue unless it is in it already, and
-- refreshes its heartbeat. `known` says it may be queued already.
local function enqueue(queue, waiters, token, known, heartbeat, hand_off, mode, want, client, identity)
  if known ~= '1' or not redis.call('ZSCORE', queue, token) then
    redis.call('ZADD', queue, 'NX', string.format('%.0f', server_us()), token)
  end
  redis.call('PEXPIRE', queue, heartbeat)
  redis.call('SET', waiters .. token,
    hand_off .. ' ' .. mode .. ' ' .. want .. ' ' .. client .. ' ' .. identity, 'PX', heartbeat)
end

local function wake(channels, record)
  -- pcall: an ACL user without access to the channel still releases; the
  -- waiter then learns on its own timer.
  redis.pcall('PUBLISH', channels .. record.client, record.token)
end

-- Wakes the first live waiter of a free lock (`head`, when the caller has
-- it already): a fair waiter ('f') is handed the lock with its fence, any
-- other is told to try.
local function wake_first(lock, fence_key, queue, waiters, retention, channels, head)
  head = head or first_live(queue, waiters)
  if not head then
    return
  end
  if head.mode == 'f' then
    local now = server_us()
    redis.call('SET', lock, head.token .. string.format(' %.0f ', now) .. head.identity,
      'PX', head.hand_off)
    leave_queue(queue, waiters, head.token)
    local fence = next_fence(fence_key, now, retention)
    redis.pcall('PUBLISH', channels .. head.client, string.format('%s %.0f', head.token, fence))
  else
    wake(channels, head)
  end
end


-- The hash primitives (ReentrantMutex, RwLock, Semaphore).

local function entry(token, value)
  local expiry, mode, owner, permits, fence, acquired, identity =
    string.match(value, '^(%d+) (%a) (%S+) (%d+) (%d+) (%d+) ?(.*)$')
  if not expiry then
    return nil
  end
  return {token = token, expiry = tonumber(expiry), mode = mode, owner = owner,
    permits = tonumber(permits), fence = tonumber(fence), acquired = acquired,
    identity = identity}
end

local function entry_value(e)
  return string.format('%.0f %s %s %d %.0f %s %s', e.expiry, e.mode, e.owner, e.permits,
    e.fence, e.acquired, e.identity)
end

-- The leases that still run at `now_ms`; the others are removed.
local function live_holders(lock, now_ms)
  local all = redis.call('HGETALL', lock)
  local live = {}
  for i = 1, #all, 2 do
    local field = all[i]
    if string.sub(field, 1, 2) == 'h:' then
      local e = entry(string.sub(field, 3), all[i + 1])
      if e and e.expiry > now_ms then
        live[#live + 1] = e
      else
        redis.call('HDEL', lock, field)
      end
    end
  end
  return live
end

-- Sets the key's expiry to the last lease's, or removes a lock nobody
-- holds; a semaphore keeps its permit count for `retention` ms.
local function settle(lock, live, now_ms, retention)
  local last = 0
  for _, e in ipairs(live) do
    if e.expiry > last then
      last = e.expiry
    end
  end
  if last > now_ms then
    local keep = last - now_ms
    if redis.call('HGET', lock, 'kind') == 'semaphore' and tonumber(retention) > keep then
      keep = tonumber(retention)
    end
    redis.call('PEXPIRE', lock, string.format('%.0f', keep))
  elseif redis.call('HGET', lock, 'kind') == 'semaphore' then
    redis.call('PEXPIRE', lock, retention)
  else
    redis.call('DEL', lock)
  end
end

-- Wakes every waiter at the front of the queue that can be admitted now:
-- the first of a free reentrant lock; the readers at the front of an
-- rw-lock no writer holds, or its first writer when nobody holds it; the
-- semaphore's waiters in order while their permits fit.
local function wake_hash(kind, lock, queue, waiters, channels, live)
  local waiting = live_waiters(queue, waiters, nil)
  if #waiting == 0 then
    return
  end
  if kind == 'semaphore' then
    local free = (tonumber(redis.call('HGET', lock, 'permits')) or 0)
    for _, e in ipairs(live) do
      free = free - e.permits
    end
    for _, w in ipairs(waiting) do
      if w.want > free then
        return
      end
      free = free - w.want
      wake(channels, w)
    end
    return
  end
  if kind == 'rwlock' then
    for _, e in ipairs(live) do
      if e.mode == 'w' then
        return
      end
    end
    for i, w in ipairs(waiting) do
      if w.mode == 'w' then
        if i == 1 and #live == 0 then
          wake(channels, w)
        end
        return
      end
      wake(channels, w)
    end
    return
  end
  if #live == 0 then
    wake(channels, waiting[1])
  end
end

-- Wakes the waiters of a lock whose key is gone: the readers at the front
-- of an rw-lock's queue together (or its first writer), else the first
-- waiter as `wake_first` does.
local function wake_free(lock, fence_key, queue, waiters, retention, channels)
  local head = first_live(queue, waiters)
  if head and (head.mode == 'r' or head.mode == 'w') then
    wake_hash('rwlock', lock, queue, waiters, channels, {})
  else
    wake_first(lock, fence_key, queue, waiters, retention, channels, head)
  end
end
