//! `flowint`: named unsigned 32-bit integers per flow, set, added to,
//! subtracted from and compared by rules — Suricata's flowint
//! (detect-flowint.c).
//!
//! The variables live in the flow's record ([`crate::engine::FlowState`],
//! version 7): at most [`MAX_FLOWINTS`] per flow, each `[id u16][value u32]`
//! (6 bytes), ids naming the loaded rule set's variables
//! ([`Flowints::names`]). Like flowbits they are shared by both directions
//! and survive a new SYN on the same 5-tuple; a change is written to the
//! store before the batch leaves (acknowledged), so any instance continues
//! the flow with its counters.
//!
//! Semantics, as Suricata's `DetectFlowintMatch`:
//! * conditions (`<`, `<=`, `==`, `!=`, `>=`, `>`) hold only if the variable
//!   is set; `isset`/`notset` (`isnotset`) test whether it is. A variable
//!   operand that is not set counts as 0. Conditions are checked when the
//!   rule's other keywords matched, with its flowbits conditions;
//! * changes are applied in rule order after the rule matched (Suricata's
//!   post-match list), also for `noalert` rules: `=` sets, `+` adds (an unset
//!   variable starts from 0), `-` subtracts from a set variable and does
//!   nothing to an unset one; arithmetic wraps modulo 2^32 as Suricata's
//!   `uint32_t` does.
//!
//! A variable set when [`MAX_FLOWINTS`] others are already set on the flow
//! is not recorded (as a flowbit beyond `MAX_FLOWBITS`).

use rustc_hash::FxHashMap;
use sluice_state::{DecodeError, Reader, Writer};

use crate::rules::{FlowintOp, FlowintVal, Rule};

/// Flowint variables kept at once per flow.
pub const MAX_FLOWINTS: usize = 8;

/// The flowint variables set on a flow (ids from [`Flowints::names`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowInts {
    n: u8,
    vars: [(u16, u32); MAX_FLOWINTS],
}

impl FlowInts {
    /// The value of variable `id`, if set.
    #[inline]
    pub fn get(&self, id: u16) -> Option<u32> {
        self.vars[..self.n as usize]
            .iter()
            .find(|(i, _)| *i == id)
            .map(|&(_, v)| v)
    }

    /// Sets variable `id` to `v` (not recorded if it is not set and
    /// [`MAX_FLOWINTS`] others are).
    pub fn set(&mut self, id: u16, v: u32) {
        let n = self.n as usize;
        if let Some(slot) = self.vars[..n].iter_mut().find(|(i, _)| *i == id) {
            slot.1 = v;
        } else if n < MAX_FLOWINTS {
            self.vars[n] = (id, v);
            self.n += 1;
        }
    }

    /// Number of variables set.
    pub fn len(&self) -> usize {
        self.n as usize
    }

    /// True if none is set.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Appends `[n u8][n × (id u16, value u32)]`.
    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.u8(self.n);
        for &(id, v) in &self.vars[..self.n as usize] {
            w.u16(id).u32(v);
        }
    }

    /// Reads what [`FlowInts::encode`] wrote.
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<FlowInts, DecodeError> {
        let n = r.u8()?;
        if n as usize > MAX_FLOWINTS {
            return Err(DecodeError("too many flowints"));
        }
        let mut s = FlowInts::default();
        for i in 0..n as usize {
            s.vars[i] = (r.u16()?, r.u32()?);
        }
        s.n = n;
        Ok(s)
    }

    /// Encoded size.
    pub fn encoded_len(&self) -> usize {
        1 + 6 * self.n as usize
    }
}

/// One compiled `flowint` keyword.
#[derive(Debug, Clone, Copy)]
struct Op {
    id: u16,
    op: FlowintOp,
    val: Operand,
}

#[derive(Debug, Clone, Copy)]
enum Operand {
    None,
    Num(u32),
    Var(u16),
}

/// The rules' flowint keywords, names as ids.
#[derive(Debug, Default)]
pub struct Flowints {
    /// Per rule, its keywords in rule order (empty: none).
    ops: Vec<Box<[Op]>>,
    /// Variable names, by id.
    pub names: Vec<String>,
}

impl Flowints {
    /// The flowint keywords of `rules`.
    pub fn new(rules: &[Rule]) -> Flowints {
        let mut ids: FxHashMap<String, u16> = FxHashMap::default();
        let mut names = Vec::new();
        let mut id = |n: &str| {
            *ids.entry(n.to_string()).or_insert_with(|| {
                names.push(n.to_string());
                (names.len() - 1) as u16
            })
        };
        let ops = rules
            .iter()
            .map(|r| {
                r.flowints
                    .iter()
                    .map(|f| Op {
                        id: id(&f.name),
                        op: f.op,
                        val: match &f.val {
                            None => Operand::None,
                            Some(FlowintVal::Num(n)) => Operand::Num(*n),
                            Some(FlowintVal::Var(v)) => Operand::Var(id(v)),
                        },
                    })
                    .collect()
            })
            .collect();
        Flowints { ops, names }
    }

    /// True if rule `rule` uses flowint.
    #[inline]
    pub fn uses(&self, rule: u32) -> bool {
        self.ops.get(rule as usize).is_some_and(|o| !o.is_empty())
    }

    fn operand(v: Operand, ints: &FlowInts) -> u32 {
        match v {
            Operand::None => 0,
            Operand::Num(n) => n,
            Operand::Var(id) => ints.get(id).unwrap_or(0),
        }
    }

    /// True if the flow's variables satisfy rule `rule`'s flowint conditions.
    #[inline]
    pub fn ok(&self, rule: u32, ints: &FlowInts) -> bool {
        let Some(ops) = self.ops.get(rule as usize) else {
            return true;
        };
        ops.iter().all(|o| {
            let cur = ints.get(o.id);
            let t = Self::operand(o.val, ints);
            match o.op {
                FlowintOp::Set | FlowintOp::Add | FlowintOp::Sub => true,
                FlowintOp::IsSet => cur.is_some(),
                FlowintOp::NotSet => cur.is_none(),
                FlowintOp::Lt => cur.is_some_and(|c| c < t),
                FlowintOp::Le => cur.is_some_and(|c| c <= t),
                FlowintOp::Eq => cur.is_some_and(|c| c == t),
                FlowintOp::Ne => cur.is_some_and(|c| c != t),
                FlowintOp::Ge => cur.is_some_and(|c| c >= t),
                FlowintOp::Gt => cur.is_some_and(|c| c > t),
            }
        })
    }

    /// Applies rule `rule`'s flowint changes, in rule order (it matched).
    #[inline]
    pub fn apply(&self, rule: u32, ints: &mut FlowInts) {
        let Some(ops) = self.ops.get(rule as usize) else {
            return;
        };
        for o in ops.iter() {
            let t = Self::operand(o.val, ints);
            match (o.op, ints.get(o.id)) {
                (FlowintOp::Set, _) => ints.set(o.id, t),
                (FlowintOp::Add, cur) => ints.set(o.id, cur.unwrap_or(0).wrapping_add(t)),
                (FlowintOp::Sub, Some(cur)) => ints.set(o.id, cur.wrapping_sub(t)),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{parse_rule, Vars};

    fn compile(opts: &[&str]) -> Flowints {
        let rules: Vec<Rule> = opts
            .iter()
            .enumerate()
            .map(|(i, o)| {
                parse_rule(
                    &format!(
                        "alert tcp any any -> any any (content:\"x\"; {o} sid:{};)",
                        i + 1
                    ),
                    &Vars::new(),
                )
                .unwrap()
            })
            .collect();
        Flowints::new(&rules)
    }

    /// Suricata's semantics: comparisons need the variable set, `+` starts
    /// an unset variable from 0, `-` leaves an unset one unset, an unset
    /// operand variable is 0, arithmetic wraps.
    #[test]
    fn semantics() {
        let f = compile(&[
            "flowint:cnt,+,1;",
            "flowint:cnt,>=,2;",
            "flowint:cnt,-,5;",
            "flowint:cnt,isset;",
            "flowint:cnt,notset;",
            "flowint:other,=,cnt;",
            "flowint:cnt,==,other;",
            "flowint:cnt,<,missing;",
            "flowint:cnt,=,4294967295;",
            "flowint:cnt,!=,0;",
        ]);
        let mut s = FlowInts::default();
        assert!(!f.ok(1, &s), "compare on an unset variable");
        assert!(!f.ok(3, &s) && f.ok(4, &s));
        f.apply(2, &mut s);
        assert_eq!(s.get(0), None, "sub on an unset variable sets nothing");
        f.apply(0, &mut s);
        assert_eq!(s.get(0), Some(1));
        assert!(!f.ok(1, &s));
        f.apply(0, &mut s);
        assert!(f.ok(1, &s) && f.ok(3, &s) && !f.ok(4, &s));
        assert!(!f.ok(6, &s), "cnt == other: other is not set");
        f.apply(5, &mut s);
        assert_eq!(s.get(1), Some(2));
        assert!(f.ok(6, &s));
        assert!(!f.ok(7, &s), "an unset operand is 0: 2 < 0 fails");
        f.apply(2, &mut s);
        assert_eq!(s.get(0), Some(2u32.wrapping_sub(5)));
        f.apply(8, &mut s);
        f.apply(0, &mut s);
        assert_eq!(s.get(0), Some(0), "wraps");
        assert!(!f.ok(9, &s));
    }

    #[test]
    fn capacity_and_codec() {
        let mut s = FlowInts::default();
        for i in 0..(MAX_FLOWINTS as u16 + 2) {
            s.set(i, i as u32 * 1000);
        }
        assert_eq!(s.len(), MAX_FLOWINTS);
        assert_eq!(s.get(MAX_FLOWINTS as u16), None);
        s.set(3, 7);
        assert_eq!(s.get(3), Some(7));
        let mut buf = Vec::new();
        s.encode(&mut Writer::new(&mut buf));
        assert_eq!(buf.len(), s.encoded_len());
        let back = FlowInts::decode(&mut Reader::new(&buf)).unwrap();
        assert_eq!(back, s);
        buf[0] = MAX_FLOWINTS as u8 + 1;
        assert!(FlowInts::decode(&mut Reader::new(&buf)).is_err());
    }
}
