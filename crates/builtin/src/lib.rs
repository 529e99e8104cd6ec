//! The built-in function types, registered under the names chain files use.
//!
//! | type       | crate            |
//! |------------|------------------|
//! | `pass`     | this crate (forwards everything; the forward-only baseline) |
//! | `firewall` | `sluice-firewall` |
//! | `nat`      | `sluice-nat` |
//! | `lb`       | `sluice-lb` |
//! | `ips`      | `sluice-ips` |
//! | `monitor`  | `sluice-monitor` |
//!
//! The chain's `reassembly:` section configures `sluice-reassembly`, the shared
//! stream stage.

use std::path::Path;

use serde::Deserialize;
use sluice_chain::{Registry, StreamStage};
use sluice_nf::{Batch, Ctx, Namespace, NetworkFunction, NfError, StateStore};
use sluice_reassembly::Reassembler;
use yaml_serde::Value;

/// Deserialises a function's YAML configuration, turning serde's message into one
/// that names the bad key.
pub fn config<T: for<'de> Deserialize<'de>>(v: &Value) -> Result<T, String> {
    let v = if matches!(v, Value::Null) {
        Value::Mapping(Default::default())
    } else {
        v.clone()
    };
    yaml_serde::from_value(v).map_err(|e| e.to_string())
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

/// The shared TCP reassembler as the chain's stream stage.
struct ReassemblyStage(Reassembler);

impl StreamStage for ReassemblyStage {
    fn process(
        &mut self,
        batch: &mut Batch,
        store: &mut dyn StateStore,
        streams: &mut sluice_nf::Streams,
        stage: u8,
    ) -> Result<(), sluice_nf::StoreError> {
        self.0
            .process(batch, store, streams, stage)
            .map_err(Into::into)
    }

    fn on_timers(
        &mut self,
        now_ns: u64,
        store: &mut dyn StateStore,
    ) -> Result<(), sluice_nf::StoreError> {
        self.0
            .on_timers(now_ns, store)
            .map(|_| ())
            .map_err(Into::into)
    }

    fn finish(
        &mut self,
        batch: &mut Batch,
        store: &mut dyn StateStore,
    ) -> Result<(), sluice_nf::StoreError> {
        self.0.finish(batch, store).map_err(Into::into)
    }

    fn counters(&self, out: &mut Vec<(&'static str, u64)>) {
        self.0.counter_list(out);
    }

    fn prefetch(&self, batch: &Batch, ops: &mut sluice_state::Ops) {
        self.0.prefetch(batch, ops);
    }
}

/// The registry of every built-in function type.
pub fn registry() -> Registry {
    let mut r = Registry::new();
    r.register("pass", |v, ns, _base: &Path| {
        config::<PassConfig>(v)?;
        Ok(Box::new(pass(ns)))
    });
    r.register("firewall", |v, ns, base| {
        let c = config::<sluice_firewall::Config>(v)?;
        Ok(Box::new(
            sluice_firewall::build(&c, ns, base).map_err(|e| e.to_string())?,
        ))
    });
    r.register("nat", |v, ns, base| {
        let c = config::<sluice_nat::Config>(v)?;
        Ok(Box::new(
            sluice_nat::build(&c, ns, base).map_err(|e| e.to_string())?,
        ))
    });
    r.register("lb", |v, ns, base| {
        let c = config::<sluice_lb::Config>(v)?;
        Ok(Box::new(
            sluice_lb::build(&c, ns, base).map_err(|e| e.to_string())?,
        ))
    });
    r.register("ips", |v, ns, base| {
        let c = config::<sluice_ips::Config>(v)?;
        Ok(Box::new(
            sluice_ips::build(&c, ns, base).map_err(|e| e.to_string())?,
        ))
    });
    r.register("monitor", |v, ns, base| {
        let c = config::<sluice_monitor::Config>(v)?;
        Ok(Box::new(
            sluice_monitor::build(&c, ns, base).map_err(|e| e.to_string())?,
        ))
    });
    r.register_streams(|v, _base| {
        let c = if matches!(v, Value::Null) {
            sluice_reassembly::Config::default()
        } else {
            config::<sluice_reassembly::Config>(v)?
        };
        Ok(Box::new(move |ns| {
            Box::new(ReassemblyStage(Reassembler::new(ns, c.clone()))) as Box<dyn StreamStage>
        }))
    });
    r
}
