-- Read the state of a lock without changing it.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] notification channel
-- Returns {pttl, last fence or -1, clients subscribed to the channel}.
local fence = tonumber(redis.call('GET', KEYS[2])) or -1
local subscribers = redis.call('PUBSUB', 'NUMSUB', KEYS[3])[2]
return {redis.call('PTTL', KEYS[1]), fence, subscribers}
