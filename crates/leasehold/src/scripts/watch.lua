-- A watcher's look at a lock (see LockWatch): registers (or refreshes) the
-- watcher, marks a Mutex's or FairMutex's value so that its release
-- records and publishes its end (see watched_end in watched.lua), and
-- reads the live leases and the ends recorded; or unregisters it.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] queue, KEYS[4] watch key
-- ARGV[1] the watcher's id, ARGV[2] its heartbeat ms, or '0' to unregister
-- Returns, for a look, {kind, the fence counter or -1, number of leases,
-- then per live lease "<fence or -1> <acquired µs> <ms left or -1>
-- <holder record>" (a string lock's record without its token, a hash
-- lease's entry with the ms left first, as inspect.lua gives them), then
-- per recorded end "<fence>/<acquired µs> <how> <server µs>"}; for an
-- unregister, 1.
local key = KEYS[4]
local now_us = server_us()
local now = math.floor(now_us / 1000)
if ARGV[2] == '0' then
  redis.call('HDEL', key, 'w:' .. ARGV[1])
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'w:' and tonumber(all[i + 1]) > now then
      return 1
    end
  end
  -- The last watcher: its key goes, and the mark of a Mutex's value with
  -- it unless a waiter is queued (a spurious mark would only cost its
  -- release a read of the queue).
  redis.call('DEL', key)
  local value = redis.pcall('GET', KEYS[1])
  if type(value) == 'string' and string.sub(value, -#WAITED) == WAITED
      and redis.call('EXISTS', KEYS[3]) == 0 then
    redis.call('SET', KEYS[1], string.sub(value, 1, -#WAITED - 1), 'XX', 'KEEPTTL')
  end
  return 1
end
local heartbeat = tonumber(ARGV[2])
-- Watchers whose heartbeat ran out, and ends older than two heartbeats,
-- are dropped; the key lives as long as the freshest watcher.
local all = redis.call('HGETALL', key)
local ends = {}
for i = 1, #all, 2 do
  local field, value = all[i], all[i + 1]
  local kind = string.sub(field, 1, 2)
  if kind == 'w:' then
    if tonumber(value) <= now then
      redis.call('HDEL', key, field)
    end
  elseif kind == 'e:' then
    local how, at = string.match(value, '^(%a) (%d+)$')
    if not at or tonumber(at) < now_us - 2000 * heartbeat then
      redis.call('HDEL', key, field)
    else
      ends[#ends + 1] = string.sub(field, 3) .. ' ' .. how .. ' ' .. at
    end
  end
end
redis.call('HSET', key, 'w:' .. ARGV[1], now + heartbeat)
if redis.call('PTTL', key) < heartbeat then
  redis.call('PEXPIRE', key, heartbeat)
end
local L = lib()
local kind = L.kind_of(KEYS[1])
local counter = redis.call('GET', KEYS[2])
local reply = {kind, tonumber(counter) or -1, 0}
if kind == 'mutex' then
  local value = redis.call('GET', KEYS[1])
  mark_waited(KEYS[1], value)
  reply[3] = 1
  reply[4] = (counter or '-1') .. ' ' .. (started(value) or '0') .. ' '
    .. redis.call('PTTL', KEYS[1]) .. ' ' .. (string.match(value, '^%S+ (.*)$') or '')
elseif kind == 'reentrant' or kind == 'rwlock' or kind == 'semaphore' then
  local F = family()
  local fields = redis.call('HGETALL', KEYS[1])
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, 2) == 'h:' then
      local e = F.entry(string.sub(fields[i], 3), fields[i + 1])
      if e and e.expiry > now then
        e.expiry = e.expiry - now
        reply[3] = reply[3] + 1
        reply[#reply + 1] = string.format('%.0f %s %.0f ', e.fence, e.acquired, e.expiry)
          .. F.entry_value(e)
      end
    end
  end
end
for _, e in ipairs(ends) do
  reply[#reply + 1] = e
end
return reply
