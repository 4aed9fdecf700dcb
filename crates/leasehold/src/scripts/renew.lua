-- Renew several leases in one call (the watchdog's batch, or one extend).
-- KEYS[i] lock
-- ARGV[2i-1] token for KEYS[i], ARGV[2i] new lease in milliseconds
-- Returns a list: 1 where the token still held its lock and was renewed, 0
-- where it did not, or the error Redis gave for that key (OOM, NOREPLICAS,
-- READONLY, ...), so one failing key does not sink the batch.
local renewed = {}
for i, key in ipairs(KEYS) do
  local holder = redis.pcall('GET', key)
  if holder == ARGV[2 * i - 1] then
    local set = redis.pcall('PEXPIRE', key, ARGV[2 * i])
    if type(set) == 'table' and set.err then
      renewed[i] = set.err
    else
      renewed[i] = 1
    end
  elseif type(holder) == 'table' and holder.err and not string.find(holder.err, 'WRONGTYPE', 1, true) then
    renewed[i] = holder.err
  else
    -- Gone, another token, or replaced by a key of another type.
    renewed[i] = 0
  end
end
return renewed
