-- The hash primitives' shared functions (ReentrantMutex, RwLock,
-- Semaphore; see lib.lua for their hash), prepended after lib.lua to the
-- scripts that may meet a hash lock. They are made on the first call to
-- `family()`, so that a script that meets a mutex does not pay for them.

local family_functions

local function family()
  if family_functions then
    return family_functions
  end
  local F = {}
  local L = lib()

  -- The live waiters in arrival order, after removing the dead ones; only
  -- those that arrived before `token` when it is queued. Second, `token`'s
  -- rank in the queue, or false when it is not queued (or not given).
  function F.live_waiters(queue, waiters, token)
    local tokens
    local rank = token and redis.call('ZRANK', queue, token)
    if rank then
      tokens = rank > 0 and redis.call('ZRANGE', queue, 0, rank - 1) or {}
    else
      tokens = redis.call('ZRANGE', queue, 0, -1)
    end
    local live = {}
    -- One MGET per batch, not a GET per waiter; a batch stays well within
    -- what unpack can put on Lua's stack.
    for first = 1, #tokens, 512 do
      local last = math.min(first + 511, #tokens)
      local names = {}
      for i = first, last do
        names[#names + 1] = waiters .. tokens[i]
      end
      local records = redis.call('MGET', unpack(names))
      for i = first, last do
        local record = L.waiter_record(tokens[i], records[i - first + 1])
        if record then
          live[#live + 1] = record
        else
          L.leave_queue(queue, waiters, tokens[i])
        end
      end
    end
    return live, rank
  end

  -- The `kind`, `permits`, `x` and `d` fields of a lock's hash from its
  -- HGETALL (nil for those it lacks): one read gives them with the leases.
  -- `x` is when a semaphore's key expires, as `settle` last set it; `d`
  -- when a semaphore's count set with a lifetime ends (server ms).
  function F.fields(all)
    local kind, permits, expires, ends
    for i = 1, #all, 2 do
      local field = all[i]
      if field == 'kind' then
        kind = all[i + 1]
      elseif field == 'permits' then
        permits = all[i + 1]
      elseif field == 'd' then
        ends = tonumber(all[i + 1])
      elseif field == 'x' then
        expires = tonumber(all[i + 1])
      end
    end
    return kind, permits, expires, ends
  end

  function F.entry(token, value)
    local expiry, mode, owner, permits, fence, acquired, identity =
      string.match(value, '^(%d+) (%a) (%S+) (%d+) (%d+) (%d+) ?(.*)$')
    if not expiry then
      return nil
    end
    return {token = token, expiry = tonumber(expiry), mode = mode, owner = owner,
      permits = tonumber(permits), fence = tonumber(fence), acquired = acquired,
      identity = identity}
  end

  function F.entry_value(e)
    return string.format('%.0f %s %s %d %.0f %s %s', e.expiry, e.mode, e.owner, e.permits,
      e.fence, e.acquired, e.identity)
  end

  -- A reentrant level's marker `l:<level token>`: "<hold token> <expiry
  -- ms>". The expiry is the level's own, refreshed only by the client that
  -- holds the level (see renew.lua); a marker written without one never
  -- runs out by itself.
  function F.marker(value)
    local hold, expiry = string.match(value or '', '^(%S+) ?(%d*)$')
    return hold, tonumber(expiry)
  end

  function F.marker_value(hold, expiry)
    return string.format('%s %.0f', hold, expiry)
  end

  -- The leases that still run at `now_ms`, and how many others were
  -- removed. The level markers of a reentrant hold that is gone go too,
  -- and so do levels that ran out: a hold whose last level ran out is gone
  -- with it (a hold kept past its last level counts none, and goes with its
  -- own expiry). `all`, when given, is the hash as HGETALL just gave it.
  function F.live_holders(lock, now_ms, all)
    all = all or redis.call('HGETALL', lock)
    local live, held, markers, pruned = {}, {}, {}, 0
    for i = 1, #all, 2 do
      local field = all[i]
      local prefix = string.sub(field, 1, 2)
      if prefix == 'h:' then
        local e = F.entry(string.sub(field, 3), all[i + 1])
        if e and e.expiry > now_ms then
          live[#live + 1] = e
          held[e.token] = e
        else
          redis.call('HDEL', lock, field)
          pruned = pruned + 1
        end
      elseif prefix == 'l:' or prefix == 'k:' then
        markers[#markers + 1] = i
      end
    end
    -- A hold's hold-at-least is kept under the hold's own token.
    local shrunk = {}
    for _, i in ipairs(markers) do
      if string.sub(all[i], 1, 2) == 'k:' then
        if not held[string.sub(all[i], 3)] then
          redis.call('HDEL', lock, all[i])
        end
      else
        local hold, expiry = F.marker(all[i + 1])
        local e = hold and held[hold]
        if not e then
          redis.call('HDEL', lock, all[i])
        elseif expiry and expiry <= now_ms and e.permits > 0 then
          redis.call('HDEL', lock, all[i])
          e.permits = e.permits - 1
          shrunk[#shrunk + 1] = e
        end
      end
    end
    for _, e in ipairs(shrunk) do
      if e.permits == 0 then
        if held[e.token] then
          redis.call('HDEL', lock, 'h:' .. e.token, 'k:' .. e.token)
          held[e.token] = nil
          pruned = pruned + 1
          for i, l in ipairs(live) do
            if l == e then
              table.remove(live, i)
              break
            end
          end
        end
      else
        redis.call('HSET', lock, 'h:' .. e.token, F.entry_value(e))
      end
    end
    return live, pruned
  end

  -- Removes a rw-lock or reentrant mutex whose key outlived its last lease,
  -- so that it refuses no other kind; true when it did. A semaphore nobody
  -- holds stays: its count outlives its leases on purpose.
  function F.drop_stale(lock, kind)
    if kind ~= 'rwlock' and kind ~= 'reentrant' then
      return false
    end
    if #F.live_holders(lock, math.floor(server_us() / 1000)) > 0 then
      return false
    end
    redis.call('DEL', lock)
    return true
  end

  -- Sets the key's expiry to the last lease's, or removes a lock nobody
  -- holds; a semaphore keeps its permit count for `retention` ms. `kind`,
  -- when the caller knows it, spares reading it.
  --
  -- A semaphore's expiry, far past its leases, is set again only when it
  -- covers less than the last lease or than 63/64 of `retention` from
  -- now, not on every call; the hash keeps when it runs out (`x`, on the
  -- server's clock), and `expires` is that field as the caller read it
  -- (nil: set it).
  function F.settle(lock, live, now_ms, retention, kind, expires)
    local semaphore = function()
      if kind then
        return kind == 'semaphore'
      end
      return redis.call('HGET', lock, 'kind') == 'semaphore'
    end
    local last = 0
    for _, e in ipairs(live) do
      if e.expiry > last then
        last = e.expiry
      end
    end
    local keep = last - now_ms
    if semaphore() then
      keep = math.max(keep, tonumber(retention))
      -- A count set with a lifetime goes at its end, or with the last
      -- lease when one runs past it.
      local ends = tonumber(redis.call('HGET', lock, 'd'))
      if ends then
        keep = math.min(keep, math.max(last, ends) - now_ms)
      end
      if keep <= 0 then
        redis.call('DEL', lock)
        return
      end
      if expires and expires >= last and expires >= now_ms + keep - math.floor(keep / 64) then
        return
      end
      redis.call('PEXPIRE', lock, string.format('%.0f', keep))
      redis.call('HSET', lock, 'x', string.format('%.0f', now_ms + keep))
    elseif keep > 0 then
      redis.call('PEXPIRE', lock, string.format('%.0f', keep))
    else
      redis.call('DEL', lock)
    end
  end

  -- Wakes every waiter at the front of the queue that can be admitted now:
  -- the first of a free reentrant lock; the readers at the front of an
  -- rw-lock no writer holds, or its first writer when nobody holds it; the
  -- semaphore's waiters in order while their permits fit. `permits`, when
  -- the caller has it, is the semaphore's count as stored.
  function F.wake_hash(kind, lock, queue, waiters, channels, live, permits)
    local waiting = F.live_waiters(queue, waiters, nil)
    if #waiting == 0 then
      return
    end
    if kind == 'semaphore' then
      local free = (tonumber(permits or redis.call('HGET', lock, 'permits')) or 0)
      for _, e in ipairs(live) do
        free = free - e.permits
      end
      for _, w in ipairs(waiting) do
        if w.want > free then
          return
        end
        free = free - w.want
        L.wake(channels, w)
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
            L.wake(channels, w)
          end
          return
        end
        L.wake(channels, w)
      end
      return
    end
    if #live == 0 then
      L.wake(channels, waiting[1])
    end
  end

  family_functions = F
  return F
end
