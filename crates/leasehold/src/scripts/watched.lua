
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
-- waiter does). `fence` is the ended lease's, or nil for a string lock's,
-- whose fence is the counter's; `acquired` its start as text (a string
-- lock's is in its value).
local WATCH_ENDS_US = 20000000

local function watched_end(lock, fence_key, channels, how, fence, acquired)
  local key = lock .. ':watch'
  if redis.call('EXISTS', key) == 0 then
    return
  end
  if fence then
    fence = string.format('%.0f', fence)
  else
    fence = redis.call('GET', fence_key) or '0'
  end
  local ends = key .. ':ends'
  redis.call('ZADD', ends, server_text(), fence .. '/' .. (acquired or '0') .. ' ' .. how)
  redis.call('PEXPIRE', ends, WATCH_ENDS_US / 1000)
  publish(channels .. 'watch', how .. ' ' .. fence)
end

-- The start (µs, as text) of a string lock's lease, from its value.
local function started(value)
  return string.match(value, '^%S+ (%d+)')
end
