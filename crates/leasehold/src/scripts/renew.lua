-- Renew several leases in one call (the watchdog's batch, or one extend),
-- of any primitive: a string lock by its value, a hash lock by its lease's
-- own entry (see lib.lua). A lease made shorter than it was takes the
-- key's expiry with it.
-- KEYS[i] lock
-- ARGV[2i-1] token for KEYS[i] (for a reentrant hold, followed by the
-- levels of it that the renewing client holds, separated by spaces),
-- ARGV[2i] new lease in milliseconds
-- A reentrant hold is renewed with the levels named, each to the hold's
-- new expiry (see F.marker); if none of them is left, the renewing client
-- holds nothing of it any more, and it is not renewed.
-- Returns a list: 1 where the token still held its lock and was renewed, 0
-- where it did not, or the error Redis gave for that key (OOM, NOREPLICAS,
-- READONLY, ...), so one failing key does not sink the batch.
local renewed = {}
local now = nil
local function failed(reply)
  return type(reply) == 'table' and reply.err
end
for i, key in ipairs(KEYS) do
  -- A mutex's token is sent alone: only a hash lease's is split.
  local token, levels = ARGV[2 * i - 1], ''
  local lease = ARGV[2 * i]
  local holder = redis.pcall('GET', key)
  if type(holder) == 'string' and holds(holder, token) then
    local set = redis.pcall('PEXPIRE', key, lease)
    renewed[i] = failed(set) or 1
  elseif failed(holder) and string.find(holder.err, 'WRONGTYPE', 1, true) then
    token, levels = string.match(token, '^(%S*) ?(.*)$')
    local F = family()
    now = now or math.floor(server_us() / 1000)
    local hash = redis.call('TYPE', key)['ok'] == 'hash'
    local lease_token = token
    local value = hash and redis.call('HGET', key, 'h:' .. token)
    if hash and not value then
      -- A reentrant level's token stands for its hold.
      lease_token = F.marker(redis.call('HGET', key, 'l:' .. token))
      value = lease_token and redis.call('HGET', key, 'h:' .. lease_token)
    end
    local e = value and F.entry(lease_token, value)
    -- The levels of a reentrant hold that the token names (its own, if it
    -- is one) and that are still there.
    local ours, named = {}, {}
    if e and e.mode == 'x' then
      for level in string.gmatch(token .. ' ' .. levels, '%S+') do
        if not named[level] and F.marker(redis.call('HGET', key, 'l:' .. level)) == lease_token then
          ours[#ours + 1] = level
        end
        named[level] = true
      end
    end
    -- A reentrant hold kept with no level (released within its
    -- hold-at-least), or of which the renewing client holds no level any
    -- more, is not renewed: a late renewal must not keep it.
    if e and e.expiry > now and e.permits > 0 and (e.mode ~= 'x' or #ours > 0) then
      local own = now + tonumber(lease)
      local expiry = own
      if own < e.expiry and #ours > 0 then
        -- Shortened: the levels other clients hold of the hold keep it for
        -- as long as theirs run.
        local all = redis.call('HGETALL', key)
        for j = 1, #all, 2 do
          if string.sub(all[j], 1, 2) == 'l:' and not named[string.sub(all[j], 3)] then
            local hold, until_ms = F.marker(all[j + 1])
            if hold == lease_token then
              expiry = math.max(expiry, until_ms or e.expiry)
            end
          end
        end
      end
      local shortened = expiry < e.expiry
      e.expiry = expiry
      local set = redis.pcall('HSET', key, 'h:' .. lease_token, F.entry_value(e))
      for _, level in ipairs(ours) do
        if not failed(set) then
          set = redis.pcall('HSET', key, 'l:' .. level, F.marker_value(lease_token, own))
        end
      end
      if failed(set) then
        renewed[i] = failed(set)
      elseif shortened and redis.call('HGET', key, 'kind') ~= 'semaphore' then
        -- The key expires with the last lease, not with the longest this
        -- one ever had (a semaphore's count outlives its leases anyway). The
        -- lease is set whether or not that succeeds.
        pcall(F.settle, key, F.live_holders(key, now), now, '0')
        renewed[i] = 1
      else
        if redis.call('PTTL', key) < tonumber(lease) then
          set = redis.pcall('PEXPIRE', key, lease)
        end
        renewed[i] = failed(set) or 1
      end
    else
      renewed[i] = 0
    end
  elseif failed(holder) then
    renewed[i] = holder.err
  else
    -- Gone, or another token.
    renewed[i] = 0
  end
end
return renewed
