-- Read the state of a lock without changing it.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] queue
-- Returns {kind, pttl, last fence or -1, clients queued, permits or -1,
-- the server's time in µs, then the holders: for a string lock
-- "<acquired µs> <identity>", for a hash one
-- "<ms left> <mode> <owner> <permits> <fence> <acquired µs> <identity>"
-- per live lease}. The pttl of a hash is its longest live lease's (-2 when
-- none is live), not the key's: a semaphore's count outlives its leases.
local L = lib()
local kind = L.kind_of(KEYS[1])
local fence = fence_of(redis.call('GET', KEYS[2])) or -1
-- In µs, as the holders' acquisition times are: a holder granted in the
-- millisecond of this read has held it for a few µs, not a negative time.
local now_us = server_us()
local now = math.floor(now_us / 1000)
local reply = {kind, redis.call('PTTL', KEYS[1]), fence, redis.call('ZCARD', KEYS[3]), -1, now_us}
if kind == 'mutex' then
  -- Without the token: whoever reads it could release the lock.
  local value = redis.call('GET', KEYS[1])
  reply[7] = string.match(value, '^%S+ (.*)$') or ''
elseif kind == 'reentrant' or kind == 'rwlock' or kind == 'semaphore' then
  reply[5] = tonumber(redis.call('HGET', KEYS[1], 'permits')) or -1
  local F = family()
  local all = redis.call('HGETALL', KEYS[1])
  reply[2] = -2
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'h:' then
      local e = F.entry(string.sub(all[i], 3), all[i + 1])
      if e and e.expiry > now then
        e.expiry = e.expiry - now
        reply[2] = math.max(reply[2], e.expiry)
        reply[#reply + 1] = F.entry_value(e)
      end
    end
  end
end
return reply
