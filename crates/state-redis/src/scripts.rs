//! Server-side code: every operation that must be atomic on shared state, as
//! the functions of one Redis Functions library ([`LIBRARY`], Redis ≥ 7.0 or
//! Valkey), called with `FCALL` by name.
//!
//! A library rather than scripts (`SCRIPT LOAD` + `EVALSHA`): loading code is
//! then the store admin's business (`FUNCTION LOAD`, see
//! [`crate::acl::Admin::load_library`]) and a tenant's user needs only
//! `FCALL`, so a tenant's password cannot put Lua of its own on a store every
//! tenant shares (docs/SECURITY.md). A library is also replicated to replicas
//! and kept in RDB/AOF files, where the script cache was neither.
//!
//! Every key a function touches is passed as a key (`KEYS`), so ACL key
//! patterns and cluster slots apply to the call itself. Loops are bounded
//! server-side ([`MAX_TAKE`], [`MAX_EXPIRED`]) whatever the caller asks: any
//! tenant may call these functions with arguments of its choosing.
//!
//! The library's name carries a version, and so do its functions' names
//! (function names are global on a server): code that changes gets a new
//! version, so instances of the old and the new code share a store during an
//! upgrade, each calling its own.

/// The library's name: what `FUNCTION LOAD` registers and errors name.
pub const LIBRARY_NAME: &str = "sluice_v1";

/// Compare-and-set. `KEYS[1]`; ARGV: expect_present, expected, set_new, new.
pub const CAS: &str = "sluice_v1_cas";
/// Creates a pool unless it exists. `KEYS[1]` = pool meta hash; `ARGV[1]` = size.
pub const POOL_INIT: &str = "sluice_v1_pool_init";
/// Takes an item: never-used items first, then the least recently freed.
/// KEYS = meta hash, freed list, freed set. Returns -1 when exhausted, -2
/// without pool.
pub const POOL_ALLOC: &str = "sluice_v1_pool_alloc";
/// Takes up to `ARGV[1]` (at most [`MAX_TAKE`]) items in one step, in the order
/// as many [`POOL_ALLOC`]s would. KEYS as [`POOL_ALLOC`]. Returns the items
/// (fewer when the pool runs out), or -2 without pool.
pub const POOL_TAKE: &str = "sluice_v1_pool_take";
/// Returns an item; double frees and never-allocated items are ignored.
/// KEYS = meta hash, freed list, freed set; `ARGV[1]` = item.
pub const POOL_FREE: &str = "sluice_v1_pool_free";
/// Removes and returns up to `ARGV[2]` (at most [`MAX_EXPIRED`]) members of the
/// timer set `KEYS[1]` whose score (deadline in microseconds) is at most
/// `ARGV[1]`: one atomic step, so each timer is returned to exactly one caller.
pub const TAKE_EXPIRED: &str = "sluice_v1_take_expired";

/// The most items one [`POOL_TAKE`] hands out: the NAT takes at most 4096 at
/// once, and Lua's `unpack` fails beyond about 8000 values anyway.
pub const MAX_TAKE: u32 = 4096;

/// The most timers one [`TAKE_EXPIRED`] returns (the client asks for at most
/// this many).
pub const MAX_EXPIRED: usize = 1000;

/// Every function, as registered by [`LIBRARY`].
pub const FUNCTIONS: [&str; 6] = [
    CAS,
    POOL_INIT,
    POOL_ALLOC,
    POOL_TAKE,
    POOL_FREE,
    TAKE_EXPIRED,
];

/// The library's code, what `FUNCTION LOAD` is given. The functions' bodies
/// are those of the scripts they replace (parameters named `KEYS` and `ARGV`
/// for that), plus the bounds on `ARGV` counts.
pub const LIBRARY: &str = r#"#!lua name=sluice_v1

redis.register_function('sluice_v1_cas', function(KEYS, ARGV)
  local cur = redis.call('GET', KEYS[1])
  if ARGV[1] == '1' then
    if cur ~= ARGV[2] then return 0 end
  else
    if cur then return 0 end
  end
  if ARGV[3] == '1' then redis.call('SET', KEYS[1], ARGV[4]) else redis.call('DEL', KEYS[1]) end
  return 1
end)

redis.register_function('sluice_v1_pool_init', function(KEYS, ARGV)
  if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
  redis.call('HSET', KEYS[1], 'next', 0, 'size', ARGV[1])
  return 1
end)

redis.register_function('sluice_v1_pool_alloc', function(KEYS, ARGV)
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
end)

redis.register_function('sluice_v1_pool_take', function(KEYS, ARGV)
  local m = redis.call('HMGET', KEYS[1], 'next', 'size')
  if not m[1] then return -2 end
  local n, size, want = tonumber(m[1]), tonumber(m[2]), math.min(tonumber(ARGV[1]), 4096)
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
end)

redis.register_function('sluice_v1_pool_free', function(KEYS, ARGV)
  local n = redis.call('HGET', KEYS[1], 'next')
  if not n then return 0 end
  if tonumber(ARGV[1]) >= tonumber(n) then return 0 end
  if redis.call('SADD', KEYS[3], ARGV[1]) == 1 then redis.call('RPUSH', KEYS[2], ARGV[1]) end
  return 1
end)

redis.register_function('sluice_v1_take_expired', function(KEYS, ARGV)
  local r = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, math.min(tonumber(ARGV[2]), 1000))
  if #r > 0 then redis.call('ZREM', KEYS[1], unpack(r)) end
  return r
end)
"#;

#[cfg(test)]
mod tests {
    use super::*;

    /// FNV-1a, 64 bits: a fingerprint of the code that does not depend on the
    /// toolchain.
    fn fnv(s: &str) -> u64 {
        s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    #[test]
    fn the_library_registers_every_function_under_its_versioned_name() {
        assert!(LIBRARY.starts_with(&format!("#!lua name={LIBRARY_NAME}\n")));
        for f in FUNCTIONS {
            assert!(f.starts_with(&format!("{LIBRARY_NAME}_")), "{f}");
            let reg = format!("redis.register_function('{f}', function(KEYS, ARGV)");
            assert_eq!(LIBRARY.matches(&reg).count(), 1, "{f}");
        }
        assert_eq!(
            LIBRARY.matches("redis.register_function(").count(),
            FUNCTIONS.len()
        );
        // The bounds in the Lua code are the documented ones.
        assert!(LIBRARY.contains(&format!("math.min(tonumber(ARGV[1]), {MAX_TAKE})")));
        assert!(LIBRARY.contains(&format!("math.min(tonumber(ARGV[2]), {MAX_EXPIRED})")));
    }

    /// Servers keep a library under its name: changed code under the same
    /// name would leave instances of the old code calling the new (or the
    /// reverse) during an upgrade.
    #[test]
    fn changed_code_gets_a_new_library_version() {
        assert_eq!(
            fnv(LIBRARY),
            0x0772_16db_15cd_8818,
            "the library's code changed: name it (and its functions) sluice_v<N+1>, \
             then record its new fingerprint here"
        );
    }
}
