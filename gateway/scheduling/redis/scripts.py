"""The Lua scripts of RedisPermits (permits.py): acquire, release, restate, totals.

Every script takes one replica's four keys, which share a hash tag (one slot): `held` and `tokens`
(HASH process -> permits, tokens), `want` (HASH process -> requests waiting) and `lease` (ZSET
process -> lease expiry, ms of Redis's own clock). A field is removed rather than left at zero, so
the hashes list only the processes that hold or want something. Replies are integers.

The scripts that give room back (a release, a restatement below what Redis had, an acquire that
drops a dead process's permits) PUBLISH the calling process's name on the replica's channel
(`permits.replica_channel`, passed in ARGV) when another process waits there, so that its gates
ask again at once instead of at their next poll. Plain PUBLISH, not SPUBLISH: redis-py's
asyncio Cluster client reads sharded channels by polling each node's connection in turn, which
would bring the poll back; a plain channel is read on one connection, on any node.
"""

from __future__ import annotations

_PRELUDE = """
local held_key, tokens_key, want_key, lease_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- A process whose lease ran out (killed, or cut off from Redis) gives back all it held and wanted.
-- True if one did.
local function drop_expired(now)
  local gone = redis.call('ZRANGEBYSCORE', lease_key, '-inf', now)
  if #gone == 0 then return false end
  for _, key in ipairs({held_key, tokens_key, want_key}) do redis.call('HDEL', key, unpack(gone)) end
  redis.call('ZREMRANGEBYSCORE', lease_key, '-inf', now)
  return true
end
local function counts(key)
  local flat, by = redis.call('HGETALL', key), {}
  for i = 1, #flat, 2 do by[flat[i]] = tonumber(flat[i + 1]) or 0 end
  return by
end
local function total(by)
  local sum = 0
  for _, n in pairs(by) do sum = sum + n end
  return sum
end
local function put(key, process, n)
  if n > 0 then redis.call('HSET', key, process, n) else redis.call('HDEL', key, process) end
end
-- Room came free here: tell the processes that wait for it, if any other does (a release nobody
-- waits for sends nothing, so caps that never bind cost no messages).
local function freed(process, channel)
  local others = redis.call('HLEN', want_key)
  if redis.call('HEXISTS', want_key, process) == 1 then others = others - 1 end
  if others > 0 then redis.call('PUBLISH', channel, process) end
end
-- The keys outlive the last lease renewed in them by one more lease: nothing is left behind.
local function renew(process, now, lease_ms)
  redis.call('ZADD', lease_key, now + lease_ms, process)
  for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], 2 * lease_ms) end
end
"""

# ARGV: process, tokens, max_concurrency (0: none), max_tokens_in_flight (0: none), requests this
# process has waiting (counting the one asking), lease (ms), channel. Reply: 1 granted, 0 refused.
# The permits of a dead process it drops are published, as a release is.
#
# The share rule splits max_concurrency by demand (held + waiting) between the processes that want
# it: a share is floor(cap * demand / all demand), at least one permit. A process at or above its
# share is refused only while the free permits are no more than the other waiting processes are
# still owed, so a process that keeps releasing and asking again cannot keep the whole cap, and a
# free permit nobody else is owed is not left idle.
ACQUIRE = (
    _PRELUDE
    + """
local process, cost, waiting = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[5])
local max_n, max_tokens, lease_ms = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[6])
local function share(demand, all) return math.max(1, math.floor(max_n * demand / all)) end
local function beyond_share(held, wants, free)
  local mine = held[process] or 0
  if mine == 0 then return false end
  local demand = {[process] = mine + waiting}
  for p, n in pairs(held) do if p ~= process then demand[p] = n end end
  for p, n in pairs(wants) do if p ~= process then demand[p] = (demand[p] or 0) + n end end
  local all = total(demand)
  if mine < share(demand[process], all) then return false end
  local owed = 0
  for p, n in pairs(wants) do
    if p ~= process and n > 0 then owed = owed + math.max(0, share(demand[p], all) - (held[p] or 0)) end
  end
  return free <= owed
end
local now = now_ms()
local dropped = drop_expired(now)
local held, wants = counts(held_key), counts(want_key)
local in_flight, tokens = total(held), total(counts(tokens_key))
local granted = 1
if max_n > 0 and in_flight >= max_n then
  granted = 0
elseif max_tokens > 0 and tokens > 0 and tokens + cost > max_tokens then
  granted = 0  -- a request larger than the whole cap still goes, alone: it could never go otherwise
elseif max_n > 0 and beyond_share(held, wants, max_n - in_flight) then
  granted = 0
end
if granted == 1 then
  redis.call('HINCRBY', held_key, process, 1)
  if cost > 0 then redis.call('HINCRBY', tokens_key, process, cost) end
end
put(want_key, process, waiting - granted)  -- a granted request no longer waits
renew(process, now, lease_ms)
if dropped then freed(process, ARGV[7]) end
return granted
"""
)

# ARGV: process, permits, tokens, lease (ms), channel. Never below zero: a process whose lease lapsed (Redis
# was out of its reach) has had its fields dropped, and its next restatement puts them back.
RELEASE = (
    _PRELUDE
    + """
local process = ARGV[1]
for i, key in ipairs({held_key, tokens_key}) do
  if redis.call('HINCRBY', key, process, -tonumber(ARGV[1 + i])) <= 0 then redis.call('HDEL', key, process) end
end
renew(process, now_ms(), tonumber(ARGV[4]))
freed(process, ARGV[5])
return 1
"""
)

# ARGV: process, permits, tokens, waiting, lease (ms), channel: what the process holds and wants,
# exactly. All zero: the process leaves the replica (its fields and lease entry go). Less than
# Redis had (a graceful stop, a release undone, a want lapsed) is room for the others: published.
RESTATE = (
    _PRELUDE
    + """
local process = ARGV[1]
local permits, tokens, waiting = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local function had(key) return tonumber(redis.call('HGET', key, process) or '0') end
local less = permits < had(held_key) or tokens < had(tokens_key) or waiting < had(want_key)
put(held_key, process, permits)
put(tokens_key, process, tokens)
put(want_key, process, waiting)
if permits + tokens + waiting > 0 then
  renew(process, now_ms(), tonumber(ARGV[5]))
else
  redis.call('ZREM', lease_key, process)
end
if less then freed(process, ARGV[6]) end
return 1
"""
)

# No ARGV. Reply: permits and tokens held, processes with a live lease (expired ones dropped first).
TOTALS = (
    _PRELUDE
    + """
drop_expired(now_ms())
return {total(counts(held_key)), total(counts(tokens_key)), redis.call('ZCARD', lease_key)}
"""
)
