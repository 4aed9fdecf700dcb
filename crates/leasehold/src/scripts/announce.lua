-- Announces on a channel of a lock's shard: an election's observers read
-- its record again.
-- KEYS[1] the lock (routes the script to the lock's server)
-- ARGV[1] channel, ARGV[2] message
publish(ARGV[1], ARGV[2])
return 1
