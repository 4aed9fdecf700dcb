-- Delete the lock if it holds exactly ARGV[1]: the release of a Mutex's or
-- FairMutex's value that nobody waited for, on a server without a
-- compare-and-delete command of its own (DELIFEQ, DELEX IFEQ), at the cost
-- of one. Nothing of lib.lua: every line a script runs costs the server
-- work. A value marked since (WAITED, KEPT) differs, and is left to
-- release.lua.
-- KEYS[1] lock, ARGV[1] the value it must hold
-- Returns 1 when deleted, 0 when the lock holds anything else (another
-- type included) or nothing.
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
