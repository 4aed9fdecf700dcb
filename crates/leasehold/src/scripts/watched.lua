
-- Watchers of a lock (see watch.lua) are recorded in `<lock>:watch`, a
-- hash that lives only while one of them looks within its heartbeat.
-- A lease of a watched lock that a release or a force-release ends is
-- recorded in `<lock>:watch:ends`, a sorted set scored by the server's
-- time of the end (µs), member "<fence>/<acquired µs> <how>" (a lease is
-- its fence and its start: readers that hold together share a fence; how
-- is 'r' released, 'k' released and kept until its hold-at-least, 'f'
-- force-released), kept WATCH_ENDS_US; and published on `<channel
-- prefix>watch`. A lock nobody watches pays one EXISTS, and only on the
-- paths that read a queue already: a Mutex's or FairMutex's release
-- reaches them only when its value is marked (a watcher marks it as a
-- waiter does). `fence` is the ended lease's and `record` its start (µs,
-- as text); for a string lock `fence` is nil (its fence is the counter's)
-- and `record` is the lock's value, which has its start. One function, so
-- that a script run (where functions are not loaded once, as EVALSHA's)
-- makes one closure more, not several.
local WATCH_ENDS_US = 20000000

local function watched_end(lock, fence_key, channels, how, fence, record)
  local key = lock .. ':watch'
  if redis.call('EXISTS', key) == 0 then
    return
  end
  if fence then
    fence = string.format('%.0f', fence)
  else
    fence = string.match(redis.call('GET', fence_key) or '', '^%d+') or '0'
    record = string.match(record, '^%S+ (%d+)')
  end
  local ends = key .. ':ends'
  -- pcall: under maxmemory a script sent as EVAL/EVALSHA may not write
  -- before its first write, and this record comes before the release's
  -- DEL. The release goes on without the record (the publish still
  -- goes out, and the watch reads a lease gone without a record).
  if type(redis.pcall('ZADD', ends, server_text(),
      fence .. '/' .. (record or '0') .. ' ' .. how)) == 'number' then
    redis.call('PEXPIRE', ends, WATCH_ENDS_US / 1000)
  end
  publish(channels .. 'watch', how .. ' ' .. fence)
end
