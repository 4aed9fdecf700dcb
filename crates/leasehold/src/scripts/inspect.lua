-- Read the state of a lock without changing it.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] queue
-- Returns {pttl, last fence or -1, clients queued}.
local fence = tonumber(redis.call('GET', KEYS[2])) or -1
return {redis.call('PTTL', KEYS[1]), fence, redis.call('ZCARD', KEYS[3])}
