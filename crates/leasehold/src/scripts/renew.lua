-- Renew several leases in one call (the watchdog's batch, or one extend),
-- of any primitive: a string lock by its value, a hash lock by its lease's
-- own entry (see lib.lua). A lease made shorter than it was takes the
-- key's expiry with it.
-- KEYS[i] lock
-- ARGV[2i-1] token for KEYS[i], ARGV[2i] new lease in milliseconds
-- Returns a list: 1 where the token still held its lock and was renewed, 0
-- where it did not, or the error Redis gave for that key (OOM, NOREPLICAS,
-- READONLY, ...), so one failing key does not sink the batch.
local renewed = {}
local now = nil
local function failed(reply)
  return type(reply) == 'table' and reply.err
end
for i, key in ipairs(KEYS) do
  local token, lease = ARGV[2 * i - 1], ARGV[2 * i]
  local holder = redis.pcall('GET', key)
  if type(holder) == 'string' and holds(holder, token) then
    local set = redis.pcall('PEXPIRE', key, lease)
    renewed[i] = failed(set) or 1
  elseif failed(holder) and string.find(holder.err, 'WRONGTYPE', 1, true) then
    local F = family()
    now = now or math.floor(server_us() / 1000)
    local hash = redis.call('TYPE', key)['ok'] == 'hash'
    local lease_token = token
    local value = hash and redis.call('HGET', key, 'h:' .. token)
    if hash and not value then
      -- A reentrant level's token stands for its hold.
      lease_token = redis.call('HGET', key, 'l:' .. token)
      value = lease_token and redis.call('HGET', key, 'h:' .. lease_token)
    end
    local e = value and F.entry(lease_token, value)
    -- A reentrant hold kept with no level (released within its
    -- hold-at-least) is renewed no more: a late renewal must not keep it.
    if e and e.expiry > now and e.permits > 0 then
      local shortened = now + tonumber(lease) < e.expiry
      e.expiry = now + tonumber(lease)
      local set = redis.pcall('HSET', key, 'h:' .. lease_token, F.entry_value(e))
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
