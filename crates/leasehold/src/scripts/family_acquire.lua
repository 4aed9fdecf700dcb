-- Take a ReentrantMutex, a read or write share of an RwLock, or semaphore
-- permits (see lib.lua for the hash). A newcomer never passes a waiter that
-- the lock would serve first: a writer queued before a reader, or any
-- semaphore waiter; a queued semaphore waiter passes none whose permits
-- would no longer fit. Reentry by the same owner never waits.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] queue, KEYS[4] waiter key prefix
-- ARGV[1..9] as every acquire script takes them (see lib.lua), with
-- ARGV[9] the mode ('x' reentrant, 'r' read, 'w' write, 's' semaphore);
-- ARGV[10] kind ('reentrant', 'rwlock', 'semaphore'), ARGV[11] owner,
-- ARGV[12] permits wanted, ARGV[13] the semaphore's permits (0 for the
-- others), ARGV[14] the max hold ms, or 0 for none, ARGV[15] the reentrant
-- levels this client holds of its owner's hold, separated by spaces,
-- ARGV[16] (optional) '1' for a fair reentrant mutex: a new hold goes to the
-- first live waiter, or to a newcomer when nobody waits (a reentry never
-- waits)
-- Each reentrant level has an expiry of its own (see F.marker): a reentry
-- sets its own and those of ARGV[15] to the hold's.
-- A reentry adds a level to the owner's hold and refreshes its one lease to
-- ARGV[2] from now: never shorter than it was, never past the max hold
-- since the hold began. A hold its owner released within its hold-at-least
-- (kept, with no level) is replaced: taking it again is a new hold, with
-- its own fence, hold-at-least and max hold.
-- Returns {1, fence, lease ms} when held, with the hold's token and the ms
-- left until its max hold (-1 for none) as fourth and fifth items for a
-- reentrant mutex; {0, pttl of what blocks it (-1
-- when only waiters ahead do), 0, a holder's record} when busy;
-- {-1, kind} when the key holds another kind of lock ('hash' for a
-- semaphore count leasehold did not write); {-2} for a read to
-- write upgrade; {-3, permits} when the semaphore has another permit count
-- (unless the token waits in the queue already: it takes the stored count).
local L = lib()
local F = family()
local lock, token, mode, owner = KEYS[1], ARGV[1], ARGV[9], ARGV[11]
-- The hash in one read: its kind, a semaphore's count and the leases.
local all = redis.pcall('HGETALL', lock)
local kind, stored, expires, ends
if all.err then
  -- Not a hash.
  all = nil
  kind = L.kind_of_type(lock)
else
  kind, stored, expires, ends = F.fields(all)
  if not kind then
    kind = #all == 0 and 'none' or 'hash'
  end
end
local recounted = false
if ends and kind == 'semaphore' and ends <= math.floor(server_us() / 1000) then
  -- The count's lifetime ended: this acquisition sets the count again,
  -- granted or not (the leases held meanwhile still count against it).
  redis.call('HDEL', lock, 'd')
  redis.call('HSET', lock, 'permits', ARGV[13])
  stored, expires, recounted = nil, nil, true
end
if kind ~= 'none' and kind ~= ARGV[10] then
  if not F.drop_stale(lock, kind) then
    return {-1, kind}
  end
  all, stored, expires = {}, nil, nil
end
-- The semaphore's count: the one asked for, or the stored one for a waiter
-- already queued when an admin changed it (if what it wants still fits).
local permits = ARGV[13]
if ARGV[10] == 'semaphore' then
  if stored and stored ~= ARGV[13] then
    local count = tonumber(stored)
    if not count or count < 1 or count ~= math.floor(count) then
      -- Not a count leasehold wrote.
      return {-1, 'hash'}
    end
    if ARGV[7] == '1' and count >= tonumber(ARGV[12]) and redis.call('ZSCORE', KEYS[3], token) then
      permits = stored
    else
      return {-3, count}
    end
  end
end
local now_us, now_text = server_us()
local now = math.floor(now_us / 1000)
local live, pruned = F.live_holders(lock, now, all)
-- The last fence handed out: a reader that joins others shares it.
local function last_fence()
  return fence_of(redis.call('GET', KEYS[2])) or 0
end
-- Takes `token`, granted, out of the queue, and its waiter key with it: a
-- granted waiter leaves no record behind.
local function leave(t)
  if redis.call('ZREM', KEYS[3], t) == 1 then
    redis.call('DEL', KEYS[4] .. t)
  end
end
-- A token sent before may be queued; a newcomer is not, and asks no rank.
local queued_token = ARGV[7] == '1' and token or nil
-- The hold a reentrant level of this token belongs to.
local level_of = mode == 'x' and F.marker(redis.call('HGET', lock, 'l:' .. token))

-- Ms left until the max hold of the reentrant hold `e`, or -1.
local function cap_left(e)
  local max_hold = tonumber(ARGV[14]) or 0
  if max_hold <= 0 then
    return -1
  end
  return math.max(0, math.floor(tonumber(e.acquired) / 1000) + max_hold - now)
end

local mine, mine_w, mine_r, others = nil, nil, false, {}
for _, e in ipairs(live) do
  if (mode == 'x' and e.token == level_of) or (mode ~= 'x' and e.token == token) then
    -- An earlier attempt with this token took it, and its answer was lost.
    -- It writes all the same: a WAIT behind this script counts the writes
    -- of its own connection alone (Valkey), and that attempt's may have
    -- gone on another connection.
    leave(token)
    redis.call('HSET', lock, 'kind', ARGV[10])
    if mode == 'x' then
      return {1, e.fence, e.expiry - now, e.token, cap_left(e)}
    end
    return {1, e.fence, e.expiry - now}
  end
  if e.owner == owner and ARGV[10] ~= 'semaphore' then
    mine = e
    if e.mode == 'w' then
      mine_w = e
    else
      mine_r = true
    end
  else
    others[#others + 1] = e
  end
end

-- The fence of this grant, or nil when it must wait. `ahead` lists the
-- live waiters this one may not pass.
local fence
if mode == 'x' and mine and mine.permits == 0 and #others == 0 then
  redis.call('HDEL', lock, 'h:' .. mine.token, 'k:' .. mine.token)
  for i, e in ipairs(live) do
    if e == mine then
      table.remove(live, i)
      break
    end
  end
  mine = nil
end
if mode == 'x' then
  if mine and #others == 0 then
    mine.permits = mine.permits + 1
    local refreshed = now + tonumber(ARGV[2])
    local max_hold = tonumber(ARGV[14]) or 0
    if max_hold > 0 then
      refreshed = math.min(refreshed, math.floor(tonumber(mine.acquired) / 1000) + max_hold)
    end
    mine.expiry = math.max(mine.expiry, refreshed)
    local marker = F.marker_value(mine.token, mine.expiry)
    redis.call('HSET', lock, 'h:' .. mine.token, F.entry_value(mine), 'l:' .. token, marker)
    for level in string.gmatch(ARGV[15] or '', '%S+') do
      if F.marker(redis.call('HGET', lock, 'l:' .. level)) == mine.token then
        redis.call('HSET', lock, 'l:' .. level, marker)
      end
    end
    F.settle(lock, live, now, ARGV[3], ARGV[10], expires)
    if ARGV[7] == '1' then
      leave(token)
    end
    return {1, mine.fence, mine.expiry - now, mine.token, cap_left(mine)}
  end
  if #others == 0 then
    local head = ARGV[16] == '1' and L.first_live(KEYS[3], KEYS[4])
    if not head or head.token == token then
      fence = 'new'
    end
  end
elseif mode == 'w' then
  if mine_w then
    fence = mine_w.fence
  elseif mine_r then
    return {-2}
  elseif #others == 0 then
    local head = L.first_live(KEYS[3], KEYS[4])
    if not head or head.token == token then
      fence = 'new'
    end
  end
elseif mode == 'r' then
  local writer = false
  for _, e in ipairs(others) do
    if e.mode == 'w' then
      writer = true
    end
  end
  if mine then
    fence = last_fence()
  elseif not writer then
    -- Readers that hold together share one fence. The first reader of a
    -- read phase takes a new one, as a writer does: the counter it finds
    -- may be behind a write it never saw (a failover that lost writes
    -- rolls it back), and a reader must never report a fence older than
    -- a grant before it. A reader that joins others shares theirs.
    fence = 'new'
    for _, w in ipairs(F.live_waiters(KEYS[3], KEYS[4], queued_token)) do
      if w.mode == 'w' and w.token ~= token then
        fence = nil
        break
      end
    end
    if fence and #others > 0 then
      fence = last_fence()
    end
  end
  -- With the counter gone (a restart without persistence, its retention
  -- run out) while readers hold, their fence is unknown, and 0 would be
  -- refused by every fenced resource: a new fence, larger than every
  -- fence before it.
  if fence == 0 then
    fence = 'new'
  end
else
  -- A newcomer waits behind any waiter. A queued waiter may go before
  -- those ahead of it only while their permits still fit after its own:
  -- a release wakes every waiter that fits at once, and they come back in
  -- any order.
  local free = tonumber(permits)
  for _, e in ipairs(others) do
    free = free - e.permits
  end
  -- Waiters only take permits away: when the holders leave too few, the
  -- queue is not read.
  local want = tonumber(ARGV[12])
  if want <= free then
    local waiting, queued = F.live_waiters(KEYS[3], KEYS[4], queued_token)
    for _, w in ipairs(waiting) do
      if not queued or w.want > free then
        free = -1
        break
      end
      free = free - w.want
    end
    if want <= free then
      fence = 'new'
    end
  end
end

if fence then
  if fence == 'new' then
    fence = next_fence(KEYS[2], now_us, ARGV[3], now_text)
  end
  local granted = {token = token, expiry = now + tonumber(ARGV[2]), mode = mode, owner = owner,
    permits = tonumber(ARGV[12]), fence = fence, acquired = now_text,
    identity = ARGV[8]}
  if ARGV[10] == 'semaphore' then
    redis.call('HSET', lock, 'kind', ARGV[10], 'h:' .. token, F.entry_value(granted),
      'permits', permits)
  else
    redis.call('HSET', lock, 'kind', ARGV[10], 'h:' .. token, F.entry_value(granted))
  end
  if mode == 'x' then
    redis.call('HSET', lock, 'l:' .. token, F.marker_value(token, granted.expiry))
  end
  live[#live + 1] = granted
  F.settle(lock, live, now, ARGV[3], ARGV[10], expires)
  if ARGV[7] == '1' then
    leave(token)
  end
  if mode == 'x' then
    return {1, fence, tonumber(ARGV[2]), token, -1}
  end
  return {1, fence, tonumber(ARGV[2])}
end

if pruned > 0 or recounted then
  -- The leases that ran out may have been the last: the key goes with
  -- them; a count set again is kept for the retention.
  F.settle(lock, live, now, ARGV[3], ARGV[10], expires)
end

if ARGV[4] == '1' then
  L.enqueue(KEYS[3], KEYS[4], token, now_text, ARGV[5], '0', mode, ARGV[12], ARGV[6], ARGV[8])
end
-- What blocks it: the earliest lease of another owner to run out.
local blocker, until_ms = '', nil
for _, e in ipairs(others) do
  if not until_ms or e.expiry < until_ms then
    until_ms = e.expiry
    blocker = F.entry_value(e)
  end
end
-- No hash lock is handed over: its waiters need no last fence.
return {0, until_ms and (until_ms - now) or -1, 0, blocker}
