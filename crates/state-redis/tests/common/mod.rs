//! What every backend must do identically.

use sluice_state::{Key, Namespace, Ops, StateStore};

fn k(t: u8, p: &[u8]) -> Key {
    Key::new(Namespace(3), t, p)
}

/// A script of operations exercising every kind, with its results rendered as text.
pub fn scenario(store: &mut dyn StateStore) -> Vec<String> {
    let mut out = Vec::new();
    let mut ops = Ops::new();
    let g0 = ops.get(k(1, b"a"));
    ops.put(k(1, b"a"), b"v1\x00\xff");
    let g1 = ops.get(k(1, b"a"));
    let c1 = ops.compare_and_set_raw(k(1, b"a"), Some(b"nope"), Some(b"x"));
    let c2 = ops.compare_and_set_raw(k(1, b"a"), Some(b"v1\x00\xff"), Some(b"v2"));
    let c3 = ops.compare_and_set_raw(k(1, b"b"), None, Some(b"new"));
    let c4 = ops.compare_and_set_raw(k(1, b"b"), None, Some(b"again"));
    let g2 = ops.get(k(1, b"a"));
    ops.delete(k(1, b"a"));
    let g3 = ops.get(k(1, b"a"));
    // Appends: to an absent value, then growing it past any inline size.
    ops.append(k(1, b"c"), b"ab\x00");
    ops.append(k(1, b"c"), &[b'z'; 40]);
    let g4 = ops.get(k(1, b"c"));
    let i1 = ops.incr(k(2, b"load"), 5);
    let i2 = ops.incr(k(2, b"load"), -7);
    let p0 = ops.pool_init(k(3, b"pool"), 3);
    let p1 = ops.pool_init(k(3, b"pool"), 100);
    let allocs: Vec<_> = (0..4).map(|_| ops.pool_alloc(k(3, b"pool"))).collect();
    ops.pool_free(k(3, b"pool"), 1);
    ops.pool_free(k(3, b"pool"), 1);
    ops.pool_free(k(3, b"pool"), 7);
    let a5 = ops.pool_alloc(k(3, b"pool"));
    let a6 = ops.pool_alloc(k(3, b"pool"));
    let nopool = ops.pool_alloc(k(3, b"missing"));
    // Taking several at once: fresh items first, then the least recently freed.
    let q = k(3, b"pool2");
    ops.pool_init(q, 5);
    let t1 = ops.pool_take(q, 3);
    ops.pool_free(q, 1);
    ops.pool_free(q, 0);
    let t2 = ops.pool_take(q, 4);
    let t3 = ops.pool_take(q, 2);
    let t4 = ops.pool_take(k(3, b"missing"), 2);
    ops.arm_timer(k(4, b"t1"), 5_000_000);
    ops.arm_timer(k(4, b"t2"), 1_000_000);
    ops.arm_timer(k(4, b"t3"), 9_000_000);
    ops.cancel_timer(k(4, b"t3"));
    store.execute(&mut ops).unwrap();
    for id in [g0, g1, g2, g3, g4] {
        out.push(format!("{:?}", ops.value(id)));
    }
    for id in [c1, c2, c3, c4, p0, p1] {
        out.push(format!("swapped {}", ops.swapped(id)));
    }
    out.push(format!("counters {} {}", ops.counter(i1), ops.counter(i2)));
    for id in allocs.iter().chain([&a5, &a6, &nopool]) {
        out.push(format!("alloc {:?}", ops.allocated(*id)));
    }
    for id in [t1, t2, t3, t4] {
        out.push(format!("take {:?}", ops.taken(id).collect::<Vec<_>>()));
    }
    let mut t = Vec::new();
    store
        .take_expired(Namespace(3), 4_000_000, 10, &mut t)
        .unwrap();
    store
        .take_expired(Namespace(3), 4_000_000, 10, &mut t)
        .unwrap();
    store
        .take_expired(Namespace(3), 10_000_000, 10, &mut t)
        .unwrap();
    out.push(format!("timers {t:?}"));
    out
}
