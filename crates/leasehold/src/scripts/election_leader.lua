-- Who leads an election now.
-- KEYS[1] lock, KEYS[2] leader record
-- Returns {pttl of the lock} when nobody leads (-2: the lock is free), and
-- {pttl, fence, value} when the record names the token that holds the lock.
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
  return {pttl}
end
local record = redis.call('GET', KEYS[2])
if not record then
  return {pttl}
end
local fence, token, value = string.match(record, '^(%d+) (%x+) (.*)$')
-- The lock's value starts with its holder's token (see lib.lua).
local holder = fence and redis.pcall('GET', KEYS[1])
if type(holder) ~= 'string' or string.sub(holder, 1, #token + 1) ~= token .. ' ' then
  return {pttl}
end
return {pttl, fence, value}
