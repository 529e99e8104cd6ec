//! Compiled tenants of earlier desired states, reused while their inputs are
//! unchanged: one apply, VM or scale step changes one tenant, but every
//! change derives every host's configuration, so without this each change
//! recompiled every tenant (issue 25: apply time grew with the number of
//! tenants).
//!
//! The key is everything [`super::Desired::compile_tenant`] reads: the
//! spec and VNI, the tenant's placement and its blocks. A hit
//! compares them for equality, which costs a small fraction of a compile.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::blocks::Block;
use crate::compile::{Compiled, Placement};

/// What a tenant's compilation depends on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CompileKey {
    /// The spec as applied (a tenant deleted and applied again may restart
    /// its generation, never its text).
    pub(crate) yaml: String,
    /// The tenant's VNI.
    pub(crate) vni: u32,
    /// Where its VMs and instances are.
    pub(crate) placement: Placement,
    /// Its blocks on request.
    pub(crate) blocks: Vec<Block>,
}

/// Per tenant, the last compilation and its inputs. Every clone of a desired
/// state shares it (the reconciler clones the state for each change), and it
/// takes no part in comparing states.
#[derive(Clone, Default)]
pub struct CompileCache(Arc<Mutex<Entries>>);

/// Per tenant name, the inputs of its last compilation and its result.
type Entries = HashMap<String, (CompileKey, Arc<Compiled>)>;

impl CompileCache {
    /// The compilation of `tenant` for `key`, from the cache or from
    /// `compile` (then remembered).
    pub(crate) fn get_or<E>(
        &self,
        tenant: &str,
        key: CompileKey,
        compile: impl FnOnce() -> Result<Compiled, E>,
    ) -> Result<Arc<Compiled>, E> {
        let hit = self
            .0
            .lock()
            .ok()
            .and_then(|m| m.get(tenant).filter(|e| e.0 == key).map(|e| e.1.clone()));
        if let Some(c) = hit {
            return Ok(c);
        }
        let c = Arc::new(compile()?);
        if let Ok(mut m) = self.0.lock() {
            m.insert(tenant.to_string(), (key, c.clone()));
        }
        Ok(c)
    }

    /// Forgets tenants that are no longer applied.
    pub(crate) fn retain(&self, keep: impl Fn(&str) -> bool) {
        if let Ok(mut m) = self.0.lock() {
            m.retain(|t, _| keep(t));
        }
    }
}

impl PartialEq for CompileCache {
    fn eq(&self, _: &CompileCache) -> bool {
        true
    }
}

impl std::fmt::Debug for CompileCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.lock().map_or(0, |m| m.len());
        write!(f, "CompileCache({n} tenants)")
    }
}
