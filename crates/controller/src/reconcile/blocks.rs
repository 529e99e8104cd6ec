//! Blocks on request ([`crate::blocks`]): made and removed like any other
//! change, on a copy of the desired state that every host's configuration is
//! derived from before it is stored and pushed; each change leaves an event.

use std::time::Instant;

use super::{event, Reconciler};
use crate::blocks::{self, Block, BlockInfo, BlockRequest, MAX_BLOCKS_PER_TENANT};
use crate::error::ApiError;

impl Reconciler {
    /// The tenant's spec, or a 404.
    fn applied(&self, tenant: &str) -> Result<&sluice_tenant::TenantSpec, ApiError> {
        self.desired
            .tenants
            .get(tenant)
            .map(|t| &t.spec)
            .ok_or_else(|| ApiError::not_found(format!("tenant `{tenant}` is not applied")))
    }

    /// The tenant's blocks, by id.
    pub fn blocks(&self, tenant: &str) -> Result<Vec<BlockInfo>, ApiError> {
        let spec = self.applied(tenant)?;
        Ok(self
            .desired
            .blocks
            .values()
            .filter(|b| b.tenant == tenant)
            .map(|b| blocks::info(Some(spec), b))
            .collect())
    }

    /// Blocks traffic from `req.from` to the tenant's VM `req.vm`, for `actor`.
    /// The same block asked for again (same VM, and the same source prefix
    /// or the same source VM, whose address may have moved since) is the
    /// existing one, and changes nothing: `(false, it)`; a new one is `(true,
    /// it)`, with the hosts it was pushed to.
    pub fn add_block(
        &mut self,
        tenant: &str,
        req: BlockRequest,
        actor: &str,
        now: Instant,
    ) -> Result<(bool, BlockInfo), ApiError> {
        let spec = self.applied(tenant)?;
        let (_, src) = blocks::resolve(tenant, spec, &req)?;
        let prefix = src.to_string();
        let mine = || self.desired.blocks.values().filter(|b| b.tenant == tenant);
        let same = |b: &&Block| b.vm == req.vm && (b.prefix == prefix || b.from == req.from);
        if let Some(b) = mine().find(same) {
            return Ok((false, blocks::info(Some(spec), b)));
        }
        if mine().count() >= MAX_BLOCKS_PER_TENANT {
            return Err(ApiError::conflict(format!(
                "tenant `{tenant}` has {MAX_BLOCKS_PER_TENANT} blocks already (the most a tenant may hold): remove one first"
            )));
        }
        let mut next = self.desired.clone();
        let id = next.next_block.max(1);
        next.next_block = id + 1;
        let b = Block {
            id,
            tenant: tenant.to_string(),
            vm: req.vm,
            from: req.from,
            prefix,
            comment: req.comment,
            created_at_ms: self.unix_ms(now),
            created_by: actor.to_string(),
        };
        next.blocks.insert(id, b.clone());
        let pushed = self.commit(next, now)?;
        let mut e = event(
            "block",
            format!(
                "block {id}: traffic from {} to {tenant}/{} dropped (asked by {actor})",
                b.prefix, b.vm
            ),
        );
        e.tenant = Some(tenant.to_string());
        self.push_event(e, now);
        let mut info = blocks::info(Some(self.applied(tenant)?), &b);
        info.pushed = pushed;
        Ok((true, info))
    }

    /// Removes the tenant's block `id`; a block of another tenant is as
    /// absent as one never made.
    pub fn remove_block(
        &mut self,
        tenant: &str,
        id: u64,
        actor: &str,
        now: Instant,
    ) -> Result<BlockInfo, ApiError> {
        self.applied(tenant)?;
        let mut next = self.desired.clone();
        let b = match next.blocks.remove(&id) {
            Some(b) if b.tenant == tenant => b,
            _ => {
                return Err(ApiError::not_found(format!(
                    "tenant `{tenant}` has no block {id}"
                )))
            }
        };
        let pushed = self.commit(next, now)?;
        let mut e = event(
            "block",
            format!(
                "block {id} removed: traffic from {} to {tenant}/{} flows again (removed by {actor})",
                b.prefix, b.vm
            ),
        );
        e.tenant = Some(tenant.to_string());
        self.push_event(e, now);
        let mut info = blocks::info(self.desired.tenants.get(tenant).map(|t| &t.spec), &b);
        info.pushed = pushed;
        Ok(info)
    }
}
