-- The time left on the permit lease of a token, without changing it.
-- KEYS[1] lock; ARGV[1] token
-- Returns the ms left, or -2 when the token holds no permits.
local value = redis.pcall('HGET', KEYS[1], 'h:' .. ARGV[1])
if type(value) ~= 'string' or redis.call('HGET', KEYS[1], 'kind') ~= 'semaphore' then
  return -2
end
local e = family().entry(ARGV[1], value)
local now = math.floor(server_us() / 1000)
if not e or e.expiry <= now then
  return -2
end
return e.expiry - now
