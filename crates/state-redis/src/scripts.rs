//! Server-side scripts: every operation that must be atomic on shared state.

/// Compare-and-set. KEYS[1]; ARGV: expect_present, expected, set_new, new.
pub const CAS: &str = r#"
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if cur ~= ARGV[2] then return 0 end
else
  if cur then return 0 end
end
if ARGV[3] == '1' then redis.call('SET', KEYS[1], ARGV[4]) else redis.call('DEL', KEYS[1]) end
return 1
"#;

/// Creates a pool unless it exists. KEYS[1] = pool meta hash; ARGV[1] = size.
pub const POOL_INIT: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'next', 0, 'size', ARGV[1])
return 1
"#;

/// Takes an item: never-used items first, then the least recently freed.
/// KEYS = meta hash, freed list, freed set. Returns -1 when exhausted, -2 without pool.
pub const POOL_ALLOC: &str = r#"
local m = redis.call('HMGET', KEYS[1], 'next', 'size')
if not m[1] then return -2 end
local n = tonumber(m[1])
if n < tonumber(m[2]) then
  redis.call('HSET', KEYS[1], 'next', n + 1)
  return n
end
local f = redis.call('LPOP', KEYS[2])
if not f then return -1 end
redis.call('SREM', KEYS[3], f)
return tonumber(f)
"#;

/// Takes up to ARGV[1] items in one step, in the order as many POOL_ALLOCs
/// would. KEYS as POOL_ALLOC. Returns the items (fewer when the pool runs out),
/// or -2 without pool.
pub const POOL_TAKE: &str = r#"
local m = redis.call('HMGET', KEYS[1], 'next', 'size')
if not m[1] then return -2 end
local n, size, want = tonumber(m[1]), tonumber(m[2]), tonumber(ARGV[1])
local out = {}
local fresh = math.max(0, math.min(want, size - n))
for i = 0, fresh - 1 do out[i + 1] = n + i end
if fresh > 0 then redis.call('HSET', KEYS[1], 'next', n + fresh) end
if #out < want then
  local f = redis.call('LPOP', KEYS[2], want - #out)
  if f then
    redis.call('SREM', KEYS[3], unpack(f))
    for _, x in ipairs(f) do out[#out + 1] = tonumber(x) end
  end
end
return out
"#;

/// Returns an item; double frees and never-allocated items are ignored.
/// KEYS = meta hash, freed list, freed set; ARGV[1] = item.
pub const POOL_FREE: &str = r#"
local n = redis.call('HGET', KEYS[1], 'next')
if not n then return 0 end
if tonumber(ARGV[1]) >= tonumber(n) then return 0 end
if redis.call('SADD', KEYS[3], ARGV[1]) == 1 then redis.call('RPUSH', KEYS[2], ARGV[1]) end
return 1
"#;

/// Removes and returns up to ARGV[2] members of the timer set KEYS[1] whose score
/// (deadline in microseconds) is at most ARGV[1]: one atomic step, so each timer is
/// returned to exactly one caller.
pub const TAKE_EXPIRED: &str = r#"
local r = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
if #r > 0 then redis.call('ZREM', KEYS[1], unpack(r)) end
return r
"#;

/// Every script, in the order their SHA1s are kept.
pub const ALL: [&str; 6] = [
    CAS,
    POOL_INIT,
    POOL_ALLOC,
    POOL_FREE,
    TAKE_EXPIRED,
    POOL_TAKE,
];
