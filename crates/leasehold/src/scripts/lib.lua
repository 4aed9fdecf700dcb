-- Shared by every script (prepended to each): the server's clock, fences,
-- lock records, and the waiter queue.
--
-- A Mutex or FairMutex is a string: "<token> <acquired µs> <identity>" (the
-- acquisition time is the holder's fence: see fence_value), where the identity
-- is "<pid> <host> <client name>" (a bare token, as written by hand, counts
-- too), followed by WAITED once a waiter may be queued behind its holder (and
-- by KEPT after that, see below). The other primitives keep one hash per lock:
-- `kind`, for a semaphore `permits`, and one field per held lease, `h:<token>`
-- = "<expiry ms> <mode> <owner> <permits> <fence> <acquired µs> <identity>";
-- every lease has its own expiry on the server's clock, and the key expires
-- with the last of them (a semaphore's lives on for its count). A reentrant
-- mutex has one lease per owner's hold, whatever its depth: its token is the
-- first level's, its permits field counts the levels, and each level has a
-- marker `l:<level token>` = "<the hold's token> <the level's own expiry ms>"
-- (see F.marker in family.lua).
--
-- The waiter queue of a lock is a sorted set (token -> arrival time on the
-- server's clock, µs) plus one key per waiter, `<waiters prefix><token>`,
-- holding "hand_off_lease_ms mode want client identity" and expiring with
-- the waiter's heartbeat. Mode 'f' is a waiter that is handed the lock, 'm'
-- one that is woken to try; the hash primitives queue with their own mode
-- ('x' reentrant, 'r' reader, 'w' writer, 's' semaphore) and are woken to
-- try. A waiter whose key is gone has died. The sorted set expires with the
-- freshest heartbeat. All of them share the lock's hash tag.

-- The acquire scripts that may queue (acquire.lua, fair_acquire.lua,
-- family_acquire.lua) take the same first arguments; try_acquire.lua and
-- redlock_acquire.lua, which never queue, take the first three and the
-- holder's identity at ARGV[4] (see each):
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] queue, KEYS[4] waiter key prefix
-- ARGV[1] token, ARGV[2] lease ms, ARGV[3] fence retention ms,
-- ARGV[4] '1' to queue when busy (or refresh the waiter's place and
-- heartbeat), '3' as '1' for a token queued before (a string lock's
-- waiter that is out of the queue was handed the lock and let the hand-off
-- run out: it goes back in front), '2' when it is queued with a fresh
-- heartbeat (only the lock is marked WAITED; out of the queue, as '3'),
-- '0' not to queue, ARGV[5] heartbeat ms, ARGV[6] the
-- waiting client's id, ARGV[7] '1' when this token was sent before (it may
-- hold or be queued), ARGV[8] the holder's identity, ARGV[9] the waiter's
-- mode; what follows is the script's own. A Mutex's or FairMutex's
-- attempt that does not queue sends ARGV[5] and ARGV[6] empty and nothing
-- from ARGV[9] on.

-- Whether SET takes NX and GET together (Redis 7.0 and later, and Valkey):
-- a busy lock's holder then comes with the failed SET NX, without a GET.
-- Redis 6.2 refuses the pair, and has no REDIS_VERSION_NUM.
local SET_NX_GET = (redis.REDIS_VERSION_NUM or 0) >= 0x070000

-- The server's clock in µs, as a number and as its exact decimal text:
-- formatting a float of 16 digits costs the server more than the rest of
-- a lock's fast path, so the text is built from TIME's own digits.
local function server_text()
  local time = redis.call('TIME')
  local us = time[2]
  if #us < 6 then
    us = string.rep('0', 6 - #us) .. us
  end
  return time[1] .. us
end

local function server_us()
  local text = server_text()
  return tonumber(text), text
end

-- Whether the fence counter's value `old` (without its WAITING mark) is
-- behind the clock's text `now_text`: digits only and no longer, so that
-- they compare as their numbers (the common case, without arithmetic).
local function clock_ahead(old, now_text)
  return (#old < #now_text or (#old == #now_text and old < now_text))
    and string.find(old, '^%d+$') ~= nil
end

-- The next fence: a hybrid logical clock, max(stored + 1, server time in
-- µs), so fences stay monotonic when the counter is lost (restart without
-- persistence, failover, or its retention running out) as long as the server
-- clock does not step back. The counter expires after `retention` ms without
-- an acquisition. `now_text` is `now_us` as text, when the caller has it.
-- Returns the fence as a number (nil when the caller gave no `now_us`
-- and the clock is the fence: it is `now_text` then), as text, and
-- whether the counter carried the WAITING mark (see below): waiters may
-- be queued, and the new holder's value is to say so.
local function next_fence(key, now_us, retention, now_text)
  now_text = now_text or string.format('%.0f', now_us)
  local old = redis.call('SET', key, now_text, 'PX', retention, 'GET')
  -- Digits only: no mark either.
  if not old or clock_ahead(old, now_text) then
    return now_us, now_text, false
  end
  local waiting = false
  if string.byte(old, -1) == 119 then
    waiting = true
    old = string.match(old, '^(.-)w*$')
    if clock_ahead(old, now_text) then
      return now_us, now_text, waiting
    end
  end
  now_us = now_us or tonumber(now_text)
  -- Its digits: a Redlock master's release may name tokens after them
  -- (see mark_released).
  local stored = tonumber(string.match(old, '^%d+'))
  -- Anything leasehold did not write (NaN, infinities, beyond 2^53 where Lua
  -- numbers stop being exact) counts as a lost counter.
  if stored == nil or stored ~= stored or stored < 0 or stored >= 9007199254740992 then
    stored = 0
  end
  stored = math.floor(stored)
  if stored + 1 > now_us then
    local text = string.format('%.0f', stored + 1)
    redis.call('SET', key, text, 'PX', retention)
    return stored + 1, text, waiting
  end
  return now_us, now_text, waiting
end

-- The last fence handed out, from the counter's value as GET gives it
-- (without the WAITING mark), or nil.
local function fence_of(value)
  return tonumber(value and string.match(value, '^%d+'))
end

-- A fence counter's number, as read by GET (or a SET's GET) through
-- pcall: its digits, as a release may mark it with a trailing 'w'.
-- Anything leasehold did not write (another type, digits beyond 2^53
-- where Lua numbers stop being exact) counts as a lost counter: 0.
local function counter_digits(raw)
  local stored = type(raw) == 'string' and fence_of(raw) or nil
  if stored == nil or stored >= 9007199254740992 then
    return 0
  end
  return stored
end

-- A Redlock master's counter may name, after its digits, the tokens
-- released here without being held: " x<token>" each, the newest last.
-- Its round one may still be on its way, held in the network on a
-- connection its client gave up (the release came on a new one, within
-- the round one's limit); if it comes, it finds its token named and takes
-- nothing (redlock_acquire.lua). Several are kept, as other clients'
-- releases that find nothing here (a try of theirs that failed on this
-- master, a hold this master was no part of) may come in between; the
-- next fence written replaces them all.
local RELEASED_MARKS = 8

local function mark_released(key, token, retention)
  local raw = redis.pcall('GET', key)
  if type(raw) == 'table' then
    return
  end
  local value = raw and string.match(raw, '^%d+') or '0'
  if raw then
    local marks = {}
    for named in string.gmatch(raw, ' x(%S+)') do
      if named ~= token then
        marks[#marks + 1] = named
      end
    end
    for i = math.max(1, #marks - RELEASED_MARKS + 2), #marks do
      value = value .. ' x' .. marks[i]
    end
  end
  redis.call('SET', key, value .. ' x' .. token, 'PX', retention)
end

-- Whether the counter's value `raw` (as GET gives it, through pcall)
-- names `token` as released here (see mark_released).
local function released_here(raw, token)
  return type(raw) == 'string' and string.find(raw, ' ', 1, true) ~= nil
    and string.find(raw .. ' ', ' x' .. token .. ' ', 1, true) ~= nil
end

-- A fence counter ending in 'w' (WAITING) says that a release left the lock
-- free while waiters were queued (it woke one to try): whoever takes it
-- next marks its value WAITED, so that its release wakes the queue even if
-- the woken waiter never comes (it gave up, or died). Spurious marks only
-- cost a read of the queue.
local function mark_waiting(key, retention)
  if redis.call('APPEND', key, 'w') == 1 then
    -- There was no counter: the mark alone expires as a counter would.
    redis.call('PEXPIRE', key, retention)
  end
end

-- Publishes `message` on `channel`: the one place a script sends a
-- notification. pcall: an ACL user without access to the channel still
-- takes and releases locks; listeners then learn on their own timers.
local function publish(channel, message)
  redis.pcall('PUBLISH', channel, message)
end

-- A lease released within its hold-at-least and kept until that is over
-- ends its record (a string lock's value, a hash lease's identity) with
-- KEPT: a byte no identity has (their control characters are replaced).
local KEPT = '\31kept'

-- `record`, marked as kept.
local function kept(record)
  if string.sub(record, -#KEPT) == KEPT then
    return record
  end
  return record .. KEPT
end

-- Ends a string lock's value (before KEPT) once a waiter may be queued
-- behind its holder: a release of a value without it reads no queue.
-- Spurious marks only cost that read.
local WAITED = '\31w'

-- Marks the string lock `key` whose value is `value` as waited for, unless
-- it is already, or kept (a kept lock wakes nobody: its waiters take it
-- when it expires).
local function mark_waited(key, value)
  if string.find(value, '\31', 1, true) then
    return
  end
  redis.call('SET', key, value .. WAITED, 'XX', 'KEEPTTL')
end

-- A string lock's acquisition time is its holder's fence: `value`, just
-- written with the time `now_text`, is made to say `fence` instead when the
-- counter was ahead of the clock (rare: one more SET), and marked WAITED
-- when `waiting` (see next_fence). So the holder's fence is in its value
-- (see held_fence). Returns the value as the key has it now.
local function fence_value(key, value, now_text, fence, waiting)
  if fence == now_text and not waiting then
    return value
  end
  if fence ~= now_text then
    local space = string.find(value, ' ', 1, true)
    value = string.sub(value, 1, space) .. fence .. string.sub(value, space + 1 + #now_text)
  end
  if waiting and not string.find(value, '\31', 1, true) then
    value = value .. WAITED
  end
  redis.call('SET', key, value, 'XX', 'KEEPTTL')
  return value
end

-- The fence of the holder of a string lock whose value is `value`: its
-- acquisition time (see fence_value); for a value without one (a bare
-- token, written by hand) the counter's last fence, or -1.
local function held_fence(value, fence_key)
  return tonumber(string.match(value, '^%S+ (%d+)'))
    or fence_of(redis.call('GET', fence_key)) or -1
end

-- Whether a string lock's value is held by `token`.
local function holds(value, token)
  if value == token then
    return true
  end
  -- Without making strings: each costs the server work. A bare token may
  -- be marked (WAITED, KEPT) too.
  local after = string.byte(value, #token + 1)
  return (after == 32 or after == 31) and string.find(value, token, 1, true) == 1
end

-- The reply of an acquire script whose attempt took a free lock, writing
-- the unmarked `value` made with `now_text` (see acquire.lua): hands out
-- the fence (see next_fence), makes it the value's acquisition time (see
-- fence_value), and marks the value WAITED when the counter says waiters
-- may be queued. The reply tells the client the value when it is
-- unmarked, so that a release nobody waited for can delete it by
-- comparing (DELIFEQ, or delete_if_equal.lua): the fence, as text, which is the value's
-- acquisition time too. A marked value gets {1, fence, lease ms}.
local function take_fence(lock, value, fence_key, retention, now_text, lease)
  local fence_us, fence, waiting = next_fence(fence_key, nil, retention, now_text)
  fence_value(lock, value, now_text, fence, waiting)
  if waiting then
    return {1, fence_us or tonumber(fence), tonumber(lease)}
  end
  return fence
end

-- The queue's functions, made on the first call to `lib()`: a closure costs
-- the server work on every run of a script, and the fast paths (a free
-- lock taken, a lock released that nobody waits for, a renewal) use none
-- of them.
local lib_functions

local function lib()
  if lib_functions then
    return lib_functions
  end
  local L = {}

  -- What kind of lock `key` holds: 'none', 'mutex', a hash primitive's kind,
  -- or the Redis type of a key leasehold did not write.
  function L.kind_of(key)
    -- A hash primitive's kind in one call, the common case of a held one.
    local kind = redis.pcall('HGET', key, 'kind')
    if type(kind) == 'string' then
      return kind
    end
    return L.kind_of_type(key)
  end

  -- As `kind_of`, for a key whose `kind` field is known to be missing.
  function L.kind_of_type(key)
    local t = redis.call('TYPE', key)['ok']
    if t == 'string' then
      return 'mutex'
    elseif t == 'hash' then
      return 'hash'
    end
    return t
  end

  function L.leave_queue(queue, waiters, token)
    redis.call('ZREM', queue, token)
    redis.call('DEL', waiters .. token)
  end

  -- A waiter's record from the value of its key, or nil when its heartbeat
  -- ran out (the key is gone: nil or false).
  function L.waiter_record(token, record)
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

  -- A waiter's record, or nil when its heartbeat ran out.
  function L.waiter(waiters, token)
    return L.waiter_record(token, redis.call('GET', waiters .. token))
  end

  -- The first waiter whose heartbeat has not run out, after removing the dead
  -- ones before it, or nil. `first`, when given, is the queue's head as the
  -- caller just read it.
  function L.first_live(queue, waiters, first)
    while true do
      local head = first or redis.call('ZRANGE', queue, 0, 0)[1]
      first = nil
      if not head then
        return nil
      end
      local record = L.waiter(waiters, head)
      if record then
        return record
      end
      L.leave_queue(queue, waiters, head)
    end
  end

  -- Puts `token` at the back of the queue unless it is in it already, and
  -- refreshes its heartbeat. `now_text`, when the caller has it, is the
  -- server's clock as `server_text` gives it. With `front_if_handed`, a
  -- token that was out of the queue but still has its waiter key was
  -- handed the lock and let the hand-off run out (a hand-off leaves the
  -- key to its heartbeat; a waiter whose heartbeat ran out has none): it
  -- goes back to the front, where it was.
  function L.enqueue(queue, waiters, token, now_text, heartbeat, hand_off, mode, want, client,
      identity, front_if_handed)
    local added = redis.call('ZADD', queue, 'NX', now_text or server_text(), token)
    if added == 1 and front_if_handed and redis.call('EXISTS', waiters .. token) == 1 then
      L.to_front(queue, token)
    end
    redis.call('PEXPIRE', queue, heartbeat)
    redis.call('SET', waiters .. token,
      hand_off .. ' ' .. mode .. ' ' .. want .. ' ' .. client .. ' ' .. identity, 'PX', heartbeat)
    return added == 1
  end

  -- Moves `token`, just put at the back of the queue, to its front.
  function L.to_front(queue, token)
    local first = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
    if first[1] and first[1] ~= token then
      redis.call('ZADD', queue, 'XX', string.format('%.0f', tonumber(first[2]) - 1), token)
    end
  end

  function L.wake(channels, record)
    publish(channels .. record.client, record.token)
  end

  -- Wakes `head`, the first live waiter of a free lock (from `first_live`;
  -- nil when nobody waits): a fair waiter ('f') is handed the lock with its
  -- fence, any other is told to try.
  function L.wake_first(lock, fence_key, queue, waiters, retention, channels, head)
    if not head then
      return
    end
    if head.mode == 'f' then
      local now, now_text = server_us()
      local _, fence = next_fence(fence_key, now, retention, now_text)
      -- Others may wait behind it. Its acquisition time is its fence (see
      -- fence_value).
      redis.call('SET', lock, head.token .. ' ' .. fence .. ' ' .. head.identity .. WAITED,
        'PX', head.hand_off)
      -- Out of the queue; its key says that it was handed the lock (see
      -- `enqueue`) until its heartbeat runs out or its release removes it.
      redis.call('ZREM', queue, head.token)
      publish(channels .. head.client, head.token .. ' ' .. fence)
    else
      -- The lock is left free: whoever takes it marks it for the queue.
      mark_waiting(fence_key, retention)
      L.wake(channels, head)
    end
  end

  -- Puts `token`, out of the queue, back in it: at the front if it was
  -- handed the lock and let the hand-off run out (see `enqueue`), else at
  -- the back. `record` is its waiter record.
  function L.requeue(queue, waiters, token, heartbeat, record)
    local handed = redis.call('EXISTS', waiters .. token) == 1
    redis.call('ZADD', queue, server_text(), token)
    if handed then
      L.to_front(queue, token)
    end
    redis.call('PEXPIRE', queue, heartbeat)
    redis.call('SET', waiters .. token, record, 'PX', heartbeat)
  end

  lib_functions = L
  return L
end
