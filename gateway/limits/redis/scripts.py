"""The Lua scripts of RedisLimiter (redis_limiter.py): admission, settle, and seeding a counter.

Each runs atomically in Redis. Numbers are Lua doubles: spend and budgets compare exactly below
2^53 units; counters themselves are changed with INCRBY/DECRBY on the digit strings, so they stay
exact. Replies are lists of strings (Redis would truncate a Lua number to an integer).
"""

from __future__ import annotations

_PRELUDE = """
local W = 60000000
local function now_us(arg)
  local now = tonumber(arg)
  if now then return now end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function fmt(x) return string.format('%.17g', x) end
local function store(key, tat, now)
  if tat > now then
    redis.call('SET', key, fmt(tat), 'PX', math.ceil((tat - now) / 1000) + 1000)
  else
    redis.call('DEL', key)
  end
end
local function base_of(key, now)
  local tat = tonumber(redis.call('GET', key) or '')
  if tat and tat > now then return tat end
  return now
end
-- A hold's units off its counter's total, never below zero; a total that is gone stays gone.
local function drop(held, member)
  local units = string.match(member, '^(%d+):')
  if units and redis.call('EXISTS', held) == 1 then
    local left = redis.call('DECRBY', held, units)
    if left < 0 then redis.call('INCRBY', held, string.format('%.0f', -left)) end
  end
end
"""

# KEYS: per scope (key, then team) its spend counter, held total and holds; then window TATs.
# ARGV: now_us|'', hold member|'', hold lifetime (us), '1' if an unseeded counter must be rebuilt
# first, key budget|'', team budget|'', reserved units, spend TTL (s), then (limit, cost) per window.
# Reply: status, now, key spent, key held, team spent, team held, then per status: 'ok' or
# 'limited': (tat, wait) per window; 'quota': the scope (1 key, 2 team) and the shortfall;
# 'cold': the scopes whose counters must be rebuilt.
ADMIT = (
    _PRELUDE
    + """
local function shortfall(budget, spent, held, cost)
  spent, held = math.max(spent, 0), math.max(held, 0)
  if spent >= budget then return 'spent' end
  if spent + cost > budget then return 'over_budget' end
  if spent + held + cost > budget then return 'held' end
  return nil
end
local function expire_holds(held, holds, now)
  local gone = redis.call('ZRANGEBYSCORE', holds, '-inf', fmt(now))
  for _, member in ipairs(gone) do drop(held, member) end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', holds, '-inf', fmt(now)) end
end
local now = now_us(ARGV[1])
local member, cost = ARGV[2], tonumber(ARGV[7])
local budgets = {tonumber(ARGV[5]), tonumber(ARGV[6])}
local reply = {'ok', fmt(now)}
local cold = {}
for s = 1, 2 do
  if budgets[s] and ARGV[4] == '1' and redis.call('EXISTS', KEYS[3 * s - 1]) == 0 then
    table.insert(cold, tostring(s))
  end
end
if #cold > 0 then
  reply[1] = 'cold'
  for _ = 1, 4 do table.insert(reply, '0') end
  for _, s in ipairs(cold) do table.insert(reply, s) end
  return reply
end
local short, short_scope = nil, nil
for s = 1, 2 do
  local spent, held = redis.call('GET', KEYS[3 * s - 2]) or '0', '0'
  if budgets[s] then
    expire_holds(KEYS[3 * s - 1], KEYS[3 * s], now)
    held = redis.call('GET', KEYS[3 * s - 1]) or '0'
    if not short then
      short = shortfall(budgets[s], tonumber(spent) or 0, tonumber(held) or 0, cost)
      short_scope = s
    end
  end
  table.insert(reply, spent)
  table.insert(reply, held)
end
if short then
  reply[1] = 'quota'
  table.insert(reply, tostring(short_scope))
  table.insert(reply, short)
  return reply
end
local tats = {}
for i = 7, #KEYS do
  local limit, weight = tonumber(ARGV[2 * i - 5]), tonumber(ARGV[2 * i - 4])
  local base = base_of(KEYS[i], now)
  local charged = base + weight * (W / limit)
  local wait = 0
  tats[i] = charged
  if charged - W > now + 1 then
    reply[1] = 'limited'
    wait = charged - W - now
    tats[i] = base
  end
  table.insert(reply, fmt(tats[i]))
  table.insert(reply, fmt(wait))
end
if reply[1] == 'ok' then
  for i = 7, #KEYS do store(KEYS[i], tats[i], now) end
  if member ~= '' then
    local lifetime = tonumber(ARGV[3])
    for s = 1, 2 do
      if budgets[s] then
        redis.call('ZADD', KEYS[3 * s], fmt(now + lifetime), member)
        redis.call('PEXPIRE', KEYS[3 * s], math.ceil(lifetime / 1000) + 1000)
        redis.call('INCRBY', KEYS[3 * s - 1], ARGV[7])
        redis.call('EXPIRE', KEYS[3 * s - 1], ARGV[8])
      end
    end
  end
end
return reply
"""
)

# KEYS: key spend, team spend, then (held total, holds) per budget the requests were held against,
# then token window TATs; ARGV: now_us|'', units, spend TTL (s), tokens delta, budgets held
# against, hold members, the members..., then the limit per token window.
SETTLE = (
    _PRELUDE
    + """
if ARGV[2] ~= '0' then
  for i = 1, 2 do
    redis.call('INCRBY', KEYS[i], ARGV[2])
    redis.call('EXPIRE', KEYS[i], ARGV[3])
  end
end
local held_n, members = tonumber(ARGV[5]), tonumber(ARGV[6])
for p = 1, held_n do
  for i = 1, members do
    if redis.call('ZREM', KEYS[2 + 2 * p], ARGV[6 + i]) == 1 then drop(KEYS[1 + 2 * p], ARGV[6 + i]) end
  end
end
local delta = tonumber(ARGV[4])
if delta ~= 0 then
  local now = now_us(ARGV[1])
  local first = 3 + 2 * held_n
  for i = first, #KEYS do
    local tat = base_of(KEYS[i], now) + delta * (W / tonumber(ARGV[7 + members + i - first]))
    store(KEYS[i], math.min(math.max(tat, now), now + 2 * W), now)
  end
end
return 1
"""
)

# KEYS: a spend counter, its held total and holds; ARGV: the units the records hold, spend TTL (s).
# Raise the counter to at least the records (they lag behind it, so never lower it), then mark it
# seeded: its held total, recounted from the holds still there.
SEED = """
local current = tonumber(redis.call('GET', KEYS[1]) or '')
if not current or tonumber(ARGV[1]) > current then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
end
local held = 0
for _, member in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  held = held + (tonumber(string.match(member, '^(%d+):')) or 0)
end
redis.call('SET', KEYS[2], string.format('%.0f', held), 'EX', ARGV[2])
return 1
"""
