//! Blocks on request over the real API: a tenant blocks a source from one of
//! its VMs, lists and removes the block; another tenant's token is refused
//! without learning whether the VM exists; the compiled FIBs of the sending
//! host and of the receiving host both carry the drop, above the chain's
//! steering; the block survives a restart, and leaves an event and audit
//! entries.

mod common;

use serde_json::Value;
use sluice_controller::blocks::{BlockInfo, BlockRequest, BLOCK_ENTRY_BASE, PRIO_BLOCK};
use sluice_controller::client::{Client, ClientError};
use sluice_switch::{Action, Entry};

/// a1 on host 1 sends to b1 on host 2 through a monitor.
const SPEC: &str = "tenant: acme
elements:
  a: { type: service, vms: { a1: 10.0.0.1 } }
  b: { type: service, vms: { b1: 10.0.0.2 } }
  mon: { type: middlebox, function: monitor }
chains:
  - { name: ab, path: [a, mon, b] }
";

fn req(vm: &str, from: &str) -> BlockRequest {
    BlockRequest {
        vm: vm.into(),
        from: from.into(),
        comment: Some("noisy".into()),
    }
}

/// `method path` with `token` and a JSON body: the status and the body.
fn call(base: &str, token: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let r = ureq::request(method, &format!("{base}{path}"))
        .set("Authorization", &format!("Bearer {token}"));
    let r = if body.is_empty() {
        r.call()
    } else {
        r.set("Content-Type", "application/json").send_string(body)
    };
    match r {
        Ok(resp) => (resp.status(), resp.into_string().unwrap()),
        Err(ureq::Error::Status(code, resp)) => (code, resp.into_string().unwrap()),
        Err(e) => panic!("{method} {path}: {e}"),
    }
}

/// The block entries of tenant acme in host `h`'s configuration.
fn block_entries(c: &Client, h: u32) -> Vec<Entry> {
    c.config(h)
        .unwrap()
        .tenants
        .iter()
        .filter(|t| t.tenant == "acme")
        .flat_map(|t| t.entries.clone())
        .filter(|e| e.actions == [Action::Block])
        .collect()
}

fn status(e: ClientError) -> (u16, String) {
    match e {
        ClientError::Api { status, message } => (status, message),
        e => panic!("{e}"),
    }
}

#[test]
fn a_tenant_blocks_a_source_on_both_hosts_and_removes_the_block() {
    let dir = tempfile::tempdir().unwrap();
    let (server, admin_token) = common::start(dir.path());
    let admin = Client::new(&server.url()).with_token(Some(&admin_token));
    for h in [1, 2] {
        common::register_host(&admin, h, None);
    }
    common::register_vm(&admin, "acme", "a1", 1, "10.0.0.1");
    common::register_vm(&admin, "acme", "b1", 2, "10.0.0.2");
    admin.apply(Some("acme"), SPEC).unwrap();
    let acme_token = admin.create_token("acme-ci", "tenant:acme").unwrap().token;
    let bravo_token = admin
        .create_token("bravo-ci", "tenant:bravo")
        .unwrap()
        .token;
    let acme = Client::new(&server.url()).with_token(Some(&acme_token));
    let base = server.url();

    // The tenant blocks a1 (by name) and an external prefix from b1.
    let b = acme.block("acme", &req("b1", "a1")).unwrap();
    assert_eq!(
        (
            b.block.vm.as_str(),
            b.block.prefix.as_str(),
            b.block.created_by.as_str()
        ),
        ("b1", "10.0.0.1/32", "acme-ci")
    );
    assert_eq!(b.block.comment.as_deref(), Some("noisy"));
    assert_eq!(b.vm_addr.as_deref(), Some("10.0.0.2"));
    assert!(b.block.created_at_ms > 0);
    assert!(
        b.pushed.contains_key(&1) && b.pushed.contains_key(&2),
        "both hosts get the block: {:?}",
        b.pushed
    );
    let (code, text) = call(
        &base,
        &acme_token,
        "POST",
        "/v1/tenants/acme/blocks",
        r#"{"vm":"b1","from":"203.0.113.9/24"}"#,
    );
    assert_eq!(code, 201, "{text}");
    let ext: BlockInfo = serde_json::from_str(&text).unwrap();
    assert_eq!(ext.block.prefix, "203.0.113.0/24");
    // Asked again: the same block, 200, nothing pushed.
    let (code, text) = call(
        &base,
        &acme_token,
        "POST",
        "/v1/tenants/acme/blocks",
        r#"{"vm":"b1","from":"10.0.0.1"}"#,
    );
    assert_eq!(code, 200, "{text}");
    let again: BlockInfo = serde_json::from_str(&text).unwrap();
    assert_eq!(again.block.id, b.block.id);
    assert!(again.pushed.is_empty());
    let ids: Vec<u64> = acme
        .blocks("acme")
        .unwrap()
        .iter()
        .map(|x| x.block.id)
        .collect();
    assert_eq!(ids, vec![b.block.id, ext.block.id]);

    // The sending host (1) and the receiving host (2) both carry the drop,
    // above every chain entry, matching the source and b1's address.
    for h in [1, 2] {
        let es = block_entries(&admin, h);
        assert_eq!(es.len(), 2, "host {h}: {es:?}");
        let e = es
            .iter()
            .find(|e| e.id == BLOCK_ENTRY_BASE + b.block.id)
            .unwrap();
        assert_eq!(e.priority, PRIO_BLOCK);
        assert_eq!(e.m.src.unwrap().to_string(), "10.0.0.1/32");
        assert_eq!(e.m.dst.unwrap().to_string(), "10.0.0.2/32");
        assert!(e.m.in_port.is_none() && e.m.from_fabric.is_none() && e.m.chain_hop.is_none());
        let top = admin
            .config(h)
            .unwrap()
            .tenants
            .iter()
            .flat_map(|t| t.entries.clone())
            .filter(|e| e.actions != [Action::Block])
            .map(|e| e.priority)
            .max()
            .unwrap();
        assert!(
            top < PRIO_BLOCK,
            "host {h}: a chain entry outranks the block"
        );
    }

    // Another tenant's token: 403, the same words whether the VM exists or not.
    let mut refusals = Vec::new();
    for body in [
        r#"{"vm":"b1","from":"a1"}"#,
        r#"{"vm":"no-such-vm","from":"a1"}"#,
    ] {
        let (code, text) = call(&base, &bravo_token, "POST", "/v1/tenants/acme/blocks", body);
        assert_eq!(code, 403, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        refusals.push(v["detail"].as_str().unwrap().to_string());
    }
    assert_eq!(refusals[0], refusals[1]);
    assert!(!refusals[0].contains("b1"), "{}", refusals[0]);
    for (m, path) in [
        ("GET", "/v1/tenants/acme/blocks".to_string()),
        ("DELETE", format!("/v1/tenants/acme/blocks/{}", b.block.id)),
    ] {
        let (code, text) = call(&base, &bravo_token, m, &path, "");
        assert_eq!(code, 403, "{m} {path}: {text}");
    }
    // Nor can acme reach bravo's blocks, or remove its own under bravo's name.
    let (code, _) = call(
        &base,
        &acme_token,
        "DELETE",
        &format!("/v1/tenants/bravo/blocks/{}", b.block.id),
        "",
    );
    assert_eq!(code, 403);

    // Bad requests, as problems naming the field.
    for (body, want, field) in [
        (r#"{"vm":"nobody","from":"a1"}"#, 404, "no VM `nobody`"),
        (r#"{"vm":"b1","from":"10.0.0.0/40"}"#, 400, "from:"),
        (r#"{"vm":"b1","from":"b1"}"#, 400, "cannot block itself"),
        (r#"{"vm":"b1"}"#, 400, "body:"),
    ] {
        let (code, text) = call(&base, &acme_token, "POST", "/v1/tenants/acme/blocks", body);
        assert_eq!(code, want, "{body}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(
            v["detail"].as_str().unwrap().contains(field),
            "{body}: {text}"
        );
        assert!(v["type"]
            .as_str()
            .unwrap()
            .starts_with("https://sluice.dev/problems/"));
    }
    let (code, _) = call(
        &base,
        &acme_token,
        "DELETE",
        "/v1/tenants/acme/blocks/999",
        "",
    );
    assert_eq!(code, 404);

    // Every change left an event and an audit entry (refusals too).
    let events = admin.events(0).unwrap();
    assert_eq!(events.iter().filter(|e| e.kind == "block").count(), 2);
    let audit = admin.get_raw("/v1/audit?tenant=acme").unwrap();
    assert!(
        audit.contains("block traffic from a1 to vm acme/b1"),
        "{audit}"
    );

    // Removed: gone from the list and from both hosts' FIBs.
    let gone = acme.unblock("acme", b.block.id).unwrap();
    assert_eq!(gone.block.id, b.block.id);
    assert!(gone.pushed.contains_key(&1) && gone.pushed.contains_key(&2));
    for h in [1, 2] {
        let ids: Vec<u64> = block_entries(&admin, h).iter().map(|e| e.id).collect();
        assert_eq!(ids, vec![BLOCK_ENTRY_BASE + ext.block.id], "host {h}");
    }
    assert_eq!(status(acme.unblock("acme", b.block.id).unwrap_err()).0, 404);
    let audit = admin.get_raw("/v1/audit?tenant=acme").unwrap();
    assert!(
        audit.contains(&format!("remove block {}", b.block.id)),
        "{audit}"
    );

    // The remaining block survives a restart.
    drop(server);
    let (server, admin_token) = common::start(dir.path());
    let admin = Client::new(&server.url()).with_token(Some(&admin_token));
    let left = admin.blocks("acme").unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].block, ext.block);
    assert_eq!(block_entries(&admin, 2).len(), 1);
    // A new block after the restart gets a new id.
    let n = admin.block("acme", &req("a1", "b1")).unwrap();
    assert!(n.block.id > ext.block.id);
    assert_eq!(n.block.created_by, "admin");
}

#[test]
fn deleting_the_tenant_deletes_its_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let (server, admin_token) = common::start(dir.path());
    let admin = Client::new(&server.url()).with_token(Some(&admin_token));
    common::register_host(&admin, 1, None);
    common::register_vm(&admin, "acme", "a1", 1, "10.0.0.1");
    common::register_vm(&admin, "acme", "b1", 1, "10.0.0.2");
    admin.apply(Some("acme"), SPEC).unwrap();
    admin.block("acme", &req("b1", "0.0.0.0/0")).unwrap();
    admin.delete_tenant("acme").unwrap();
    admin.apply(Some("acme"), SPEC).unwrap();
    assert!(admin.blocks("acme").unwrap().is_empty());
    assert!(block_entries(&admin, 1).is_empty());
    assert_eq!(status(admin.blocks("nobody").unwrap_err()).0, 404);
}
