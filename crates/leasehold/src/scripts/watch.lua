-- A watcher's look at a lock (see LockWatch): registers (or refreshes) the
-- watcher, marks a Mutex's or FairMutex's value so that its release
-- records and publishes its end (see watched_end in watched.lua), and
-- reads the live leases and the ends recorded since the watcher's last
-- look; or unregisters it.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] queue, KEYS[4] watch key
-- (its ends are at KEYS[4] .. ':ends')
-- ARGV[1] the watcher's id, ARGV[2] its heartbeat ms, or '0' to unregister,
-- ARGV[3] the server's time (µs) of the watcher's last look, '' for none
-- Returns, for a look, {kind, the fence counter or -1, the server's time
-- in µs as text, number of leases, then per live lease "<fence or -1>
-- <acquired µs> <ms left or -1> <holder record>" (a string lock's record
-- without its token, a hash lease's entry with the ms left first, as
-- inspect.lua gives them), then per end recorded since ARGV[3]
-- "<fence>/<acquired µs> <how>"}; for an unregister, 1.
local key = KEYS[4]
local ends = key .. ':ends'
local now_us, now_text = server_us()
local now = math.floor(now_us / 1000)
if ARGV[2] == '0' then
  redis.call('HDEL', key, 'w:' .. ARGV[1])
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    if tonumber(all[i + 1]) > now then
      return 1
    end
  end
  -- The last watcher: its keys go, and the mark of a Mutex's value with
  -- them unless a waiter is queued (a spurious mark would only cost its
  -- release a read of the queue).
  redis.call('DEL', key, ends)
  local value = redis.pcall('GET', KEYS[1])
  if type(value) == 'string' and string.sub(value, -#WAITED) == WAITED
      and redis.call('EXISTS', KEYS[3]) == 0 then
    redis.call('SET', KEYS[1], string.sub(value, 1, -#WAITED - 1), 'XX', 'KEEPTTL')
  end
  return 1
end
local heartbeat = tonumber(ARGV[2])
-- Watchers whose heartbeat ran out are dropped; the key lives as long as
-- the freshest watcher.
local all = redis.call('HGETALL', key)
for i = 1, #all, 2 do
  if tonumber(all[i + 1]) <= now then
    redis.call('HDEL', key, all[i])
  end
end
redis.call('HSET', key, 'w:' .. ARGV[1], now + heartbeat)
if redis.call('PTTL', key) < heartbeat then
  redis.call('PEXPIRE', key, heartbeat)
end
redis.call('ZREMRANGEBYSCORE', ends, '-inf', '(' .. string.format('%.0f', now_us - WATCH_ENDS_US))
local L = lib()
local kind = L.kind_of(KEYS[1])
-- The counter's digits: a release that left the lock free for a waiter
-- marks it with a trailing 'w' (see mark_waiting in lib.lua).
local counter = string.match(redis.call('GET', KEYS[2]) or '', '^%d+')
local reply = {kind, tonumber(counter) or -1, now_text, 0}
if kind == 'mutex' then
  local value = redis.call('GET', KEYS[1])
  mark_waited(KEYS[1], value)
  reply[4] = 1
  reply[5] = (counter or '-1') .. ' ' .. (string.match(value, '^%S+ (%d+)') or '0') .. ' '
    .. redis.call('PTTL', KEYS[1]) .. ' ' .. (string.match(value, '^%S+ (.*)$') or '')
elseif kind == 'reentrant' or kind == 'rwlock' or kind == 'semaphore' then
  local F = family()
  local fields = redis.call('HGETALL', KEYS[1])
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, 2) == 'h:' then
      local e = F.entry(string.sub(fields[i], 3), fields[i + 1])
      if e and e.expiry > now then
        e.expiry = e.expiry - now
        reply[4] = reply[4] + 1
        reply[#reply + 1] = string.format('%.0f %s %.0f ', e.fence, e.acquired, e.expiry)
          .. F.entry_value(e)
      end
    end
  end
end
if ARGV[3] ~= '' then
  for _, e in ipairs(redis.call('ZRANGEBYSCORE', ends, ARGV[3], '+inf')) do
    reply[#reply + 1] = e
  end
end
return reply
