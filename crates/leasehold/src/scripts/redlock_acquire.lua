-- Round one of a lock over several masters (Redlock) on one master: take the
-- lock if it is free here, and count its fence here.
-- KEYS[1] lock, KEYS[2] fence counter
-- ARGV[1] token, ARGV[2] lease ms, ARGV[3] fence retention ms,
-- ARGV[4] the holder's identity, ARGV[5] the fence the client proposes (µs),
-- ARGV[6] how far past this server's clock a proposal may be (µs),
-- ARGV[7] this server's clock (µs) past which the request is too late to
-- take the lock, or '' for none
-- The fence here is max(counter + 1, this server's clock in µs), as a
-- single-server lock's (see next_fence in lib.lua); the proposal replaces it
-- when it is at least that and not too far ahead of the clock, so that the
-- masters of a majority with nearby clocks agree on one fence and need no
-- second round. It never makes a fence smaller than the hybrid clock's.
-- A request that arrives past ARGV[7] (held in the network while its
-- client gave up on it, and released the token without it) takes
-- nothing: its client reads this server's clock when it connects (INFO)
-- and from every reply, and sends the limit in it (see RoundOneLimit in
-- deploy/quorum/count.rs; none before its first reading, on a server whose
-- INFO has no clock).
-- A request that arrives after a release of its token here (the release
-- came on a new connection, the request was held on the old one, within
-- its limit) finds the token named in the counter (see release.lua), and
-- takes nothing either.
-- Returns {1, fence, now} when held, {0, pttl of the holder, now} when
-- busy, {2, now} when too late, {-1, kind} when the key holds another
-- kind of lock; now is this server's clock in µs.
local now, now_text = server_us()
local limit = tonumber(ARGV[7])
if limit and now > limit then
  return {2, now}
end
local value = ARGV[1] .. ' ' .. now_text .. ' ' .. ARGV[4]
if not redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
  local holder = redis.pcall('GET', KEYS[1])
  if type(holder) ~= 'string' then
    return {-1, lib().kind_of(KEYS[1])}
  end
  return {0, redis.call('PTTL', KEYS[1]), now}
end
local proposed = tonumber(ARGV[5])
if proposed and proposed >= now and proposed <= now + tonumber(ARGV[6]) then
  -- Stored at once, as it is mostly ahead of the counter; the counter it
  -- replaced says whether it was. A key of another type is not replaced
  -- by SET with GET: it is, as a lost counter, below.
  local raw = redis.pcall('SET', KEYS[2], ARGV[5], 'PX', ARGV[3], 'GET')
  if type(raw) ~= 'table' then
    if released_here(raw, ARGV[1]) then
      redis.call('SET', KEYS[2], raw, 'PX', ARGV[3])
      redis.call('DEL', KEYS[1])
      return {2, now}
    end
    local stored = counter_digits(raw)
    if stored < proposed then
      return {1, proposed, now}
    end
    local fence = math.floor(stored) + 1
    redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[3])
    return {1, fence, now}
  end
end
local raw = redis.pcall('GET', KEYS[2])
if released_here(raw, ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return {2, now}
end
local fence = math.max(math.floor(counter_digits(raw)) + 1, now)
redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[3])
return {1, fence, now}
