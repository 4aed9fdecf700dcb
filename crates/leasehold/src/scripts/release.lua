-- Release a lock held by this token, or take a waiter that gives up out of
-- the queue; then wake the waiters the lock can serve now (a FairMutex
-- waiter is handed the lock). Serves every primitive: a string is a Mutex
-- or FairMutex, a hash one of the others (see lib.lua). A reentrant level
-- is released by its own token: the hold loses one level, and goes with
-- the last.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] queue, KEYS[4] waiter key prefix,
-- KEYS[5] release memory prefix
-- ARGV[1] token, ARGV[2] '1' when this token may be queued, 'h' when it
-- is not and its guard's lock is a hash (the hash is read first), 'r' on
-- a master of a Redlock (a string lock, never queued), '0' otherwise,
-- ARGV[3] fence retention ms, ARGV[4] channel prefix,
-- ARGV[5] ms to keep the lock held instead (its hold-at-least is not over), or 0,
-- ARGV[6] the owner a hash lease must have to be released, or '',
-- ARGV[7] (with ARGV[6]) the kind the lock must be, or '',
-- ARGV[8] ms to remember a release by its token (see below), or 0,
-- ARGV[9] '' for a first attempt; for a release sent again after an attempt
-- that got no answer, 'r', or the lease's fence when such an attempt may
-- have been a compare-and-delete (delete_if_equal.lua)
-- Returns 1 when released, 2 when kept until ARGV[5] runs out (nobody is
-- woken: waiters take it when it expires), 0 when the token did not hold the
-- lock, 3 when a lease of another owner than ARGV[6] holds it, {-1, kind}
-- when the lock is of another kind than ARGV[7] (nothing changes either way).
-- A release that releases or keeps the lock records its answer for ARGV[8]
-- ms (`<KEYS[5]><token>`, written with the release, so a replica has both
-- or neither), and the same release sent again answers it: its first
-- attempt did the work, and its reply was lost. A compare-and-delete records
-- nothing: a release sent again after one finds the lock gone and the fence
-- counter still at the lease's fence (nobody took the lock since: every
-- grant moves the counter on) and answers 1, unless a force-release
-- marked the token ('f', see force_release.lua). The lease's own deadline,
-- which the client checks, rules out its expiry.
-- A reentrant level released with a keep while other levels hold on
-- records it (`k:<hold token>`, on the server's clock): the release of the
-- hold's last level keeps it until then at least, whichever client or
-- background release that is.
local token = ARGV[1]
local remembered = ARGV[9] ~= '' and redis.call('GET', KEYS[5] .. token)
if remembered and remembered ~= 'f' then
  return tonumber(remembered)
end
local function remember(result)
  if ARGV[8] ~= '0' then
    -- pcall: a refusal (OOM on a server that checks it) must not undo the
    -- release; the retry then answers unknown.
    redis.pcall('SET', KEYS[5] .. token, result, 'PX', ARGV[8])
  end
  return result
end
local holder, all
if ARGV[2] == 'h' then
  -- A hash kind's guard: its lock is read as a hash at once (and as a
  -- string if it is one now).
  all = redis.pcall('HGETALL', KEYS[1])
  if all.err then
    all = nil
    holder = redis.pcall('GET', KEYS[1])
  else
    holder = #all > 0 and all
  end
else
  holder = redis.pcall('GET', KEYS[1])
end
if ARGV[7] ~= '' then
  local found = type(holder) == 'string' and 'mutex'
    or (type(holder) == 'table' and lib().kind_of(KEYS[1]))
  if found and found ~= ARGV[7] then
    return {-1, found}
  end
end
if type(holder) == 'table' then
  -- A hash: a lease of a ReentrantMutex, an RwLock or a Semaphore. One
  -- read gives its kind, a semaphore's count and the leases.
  local F = family()
  all = all or redis.call('HGETALL', KEYS[1])
  local kind, permits, expires = F.fields(all)
  if kind ~= 'reentrant' and kind ~= 'rwlock' and kind ~= 'semaphore' then
    return redis.error_reply('WRONGTYPE the lock key holds a hash leasehold did not write')
  end
  local now = math.floor(server_us() / 1000)
  local live, pruned = F.live_holders(KEYS[1], now, all)
  local hold = token
  if kind == 'reentrant' then
    hold = F.marker(redis.call('HGET', KEYS[1], 'l:' .. token))
  end
  local released = 0
  for i, e in ipairs(live) do
    if e.token == hold then
      if ARGV[6] ~= '' and e.owner ~= ARGV[6] then
        return 3
      end
      if kind == 'reentrant' and e.permits > 1 then
        -- The owner holds it still: nobody to wake.
        e.permits = e.permits - 1
        redis.call('HSET', KEYS[1], 'h:' .. hold, F.entry_value(e))
        redis.call('HDEL', KEYS[1], 'l:' .. token)
        if tonumber(ARGV[5]) > 0 then
          local kept_until = now + tonumber(ARGV[5])
          local before = tonumber(redis.call('HGET', KEYS[1], 'k:' .. hold))
          if not before or before < kept_until then
            redis.call('HSET', KEYS[1], 'k:' .. hold, kept_until)
          end
        end
        return remember(1)
      end
      local keep = tonumber(ARGV[5])
      if kind == 'reentrant' then
        local kept_until = tonumber(redis.call('HGET', KEYS[1], 'k:' .. hold))
        if kept_until and kept_until - now > keep then
          keep = kept_until - now
        end
      end
      if keep > 0 then
        e.expiry = now + keep
        e.identity = kept(e.identity)
        if kind == 'reentrant' then
          -- Kept with no level. The owner taking it again meanwhile starts
          -- a hold of its own; the marker and the keep stay, so that this
          -- release, if tried again, keeps it as long again.
          e.permits = 0
          redis.call('HSET', KEYS[1], 'k:' .. hold, e.expiry,
            'l:' .. token, F.marker_value(hold, e.expiry))
        end
        redis.call('HSET', KEYS[1], 'h:' .. hold, F.entry_value(e))
        F.settle(KEYS[1], live, now, ARGV[3], kind, expires)
        watched_end(KEYS[1], KEYS[2], ARGV[4], 'k', e.fence, e.acquired)
        return remember(2)
      end
      redis.call('HDEL', KEYS[1], 'h:' .. hold, 'l:' .. token, 'k:' .. hold)
      watched_end(KEYS[1], KEYS[2], ARGV[4], 'r', e.fence, e.acquired)
      table.remove(live, i)
      released = 1
      break
    end
  end
  local left = 0
  if ARGV[2] == '1' then
    left = redis.call('ZREM', KEYS[3], token)
    redis.call('DEL', KEYS[4] .. token)
  end
  if released == 0 and left == 0 and pruned == 0 then
    -- Neither held nor waited, and no lease ran out: nothing changed,
    -- nobody to wake.
    return 0
  end
  F.settle(KEYS[1], live, now, ARGV[3], kind, expires)
  F.wake_hash(kind, KEYS[1], KEYS[3], KEYS[4], ARGV[4], live, permits)
  if released == 1 then
    remember(1)
  end
  return released
end
local released = 0
if holder and holds(holder, token) then
  if ARGV[5] ~= '0' then
    -- Kept, marked so (see KEPT in lib.lua), until the hold is over.
    redis.call('SET', KEYS[1], kept(holder), 'PX', ARGV[5])
    if string.find(holder, '\31', #token + 1, true) then
      watched_end(KEYS[1], KEYS[2], ARGV[4], 'k', nil, holder)
      redis.call('DEL', KEYS[4] .. token)
    end
    return remember(2)
  end
  if not string.find(holder, '\31', #token + 1, true) then
    -- Neither marked WAITED nor kept: no waiter came while it was held,
    -- the common case.
    redis.call('DEL', KEYS[1])
    return remember(1)
  end
  released = 1
  remember(1)
  watched_end(KEYS[1], KEYS[2], ARGV[4], 'r', nil, holder)
  -- A holder the lock was handed to (its value is marked) still has its
  -- waiter key, which said until now that it was handed the lock (see
  -- `enqueue` in lib.lua): its token waits no more, so the key goes with
  -- the hold rather than with its heartbeat.
  redis.call('DEL', KEYS[4] .. token)
elseif ARGV[2] == '1' then
  lib().leave_queue(KEYS[3], KEYS[4], token)
  if holder then
    -- A waiter that was woken to try and gives up instead: the holder may
    -- have taken the lock without a mark meanwhile, and is to wake those
    -- left.
    if redis.call('EXISTS', KEYS[3]) == 1 then
      mark_waited(KEYS[1], holder)
    end
    return 0
  end
else
  if ARGV[2] == 'r' then
    -- A Redlock master that does not hold the token: its round one may
    -- still be on its way here (see mark_released).
    mark_released(KEYS[2], token, ARGV[3])
  elseif not holder and string.find(ARGV[9], '^%d') and not remembered
      and string.match(redis.call('GET', KEYS[2]) or '', '^%d+') == ARGV[9] then
    -- Sent again after a compare-and-delete that may have released it:
    -- nobody took the lock since this lease did (see above).
    return 1
  end
  return 0
end
-- The lock is free now, or once its key is deleted: unless a fair waiter
-- is handed it, which overwrites the key. Readers and writers queue here
-- once the last lease of an rw-lock is gone with its key: the readers at
-- the front are woken together.
local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
local L = first and lib()
local head = first and L.first_live(KEYS[3], KEYS[4], first)
if released == 1 and not (head and head.mode == 'f') then
  redis.call('DEL', KEYS[1])
end
if not head then
  return released
end
if head.mode == 'r' or head.mode == 'w' then
  family().wake_hash('rwlock', KEYS[1], KEYS[3], KEYS[4], ARGV[4], {})
else
  L.wake_first(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[4], head)
end
return released
