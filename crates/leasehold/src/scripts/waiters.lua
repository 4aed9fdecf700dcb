-- Read a lock's waiter queue in order, without changing it.
-- KEYS[1] queue, KEYS[2] waiter key prefix
-- Returns {the server's time in µs, then for each queued waiter its
-- arrival time in µs and its record ("hand_off_ms mode want client
-- identity", see lib.lua), or '' when its heartbeat ran out}. Tokens are
-- left out: whoever reads one could take the waiter's place.
local _, now_text = server_us()
local reply = {now_text}
local queued = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #queued, 2 do
  reply[#reply + 1] = queued[i + 1]
  reply[#reply + 1] = redis.call('GET', KEYS[2] .. queued[i]) or ''
end
return reply
