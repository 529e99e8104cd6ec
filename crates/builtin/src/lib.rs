//! The built-in function types, registered under the names chain files use.
//!
//! | type       | crate            |
//! |------------|------------------|
//! | `pass`     | this crate (forwards everything; the forward-only baseline) |

use std::path::Path;

use serde::Deserialize;
use serde_yaml::Value;
use sluice_chain::Registry;
use sluice_nf::{Batch, Ctx, Namespace, NetworkFunction, NfError, StateStore};

/// Deserialises a function's YAML configuration, turning serde's message into one
/// that names the bad key.
pub fn config<T: for<'de> Deserialize<'de>>(v: &Value) -> Result<T, String> {
    let v = if matches!(v, Value::Null) {
        Value::Mapping(Default::default())
    } else {
        v.clone()
    };
    serde_yaml::from_value(v).map_err(|e| e.to_string())
}

/// A function that forwards every packet: the forward-only pipeline of benchmarks.
pub struct Pass {
    ns: Namespace,
    packets: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PassConfig {}

impl NetworkFunction for Pass {
    fn kind(&self) -> &'static str {
        "pass"
    }
    fn namespace(&self) -> Namespace {
        self.ns
    }
    fn process(
        &mut self,
        batch: &mut Batch,
        _: &mut Ctx<'_>,
        _: &mut dyn StateStore,
    ) -> Result<(), NfError> {
        self.packets += batch.pkts.iter().filter(|p| p.is_live()).count() as u64;
        Ok(())
    }
    fn counters(&self, out: &mut Vec<(&'static str, u64)>) {
        out.push(("packets", self.packets));
    }
}

/// Builds a [`Pass`] function.
pub fn pass(ns: Namespace) -> Pass {
    Pass { ns, packets: 0 }
}

/// The registry of every built-in function type.
pub fn registry() -> Registry {
    let mut r = Registry::new();
    r.register("pass", |v, ns, _base: &Path| {
        config::<PassConfig>(v)?;
        Ok(Box::new(pass(ns)))
    });
    r
}
