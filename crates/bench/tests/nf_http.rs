//! The `ips_rulefiles_http` row's pieces: the HTTP browsing mix is real
//! HTTP/1.1 over well-formed TCP, and the rule-file chain loads its files with
//! Suricata's default variables.

use sluice_bench::nf::{http_trace, ips_files_chain, load_spec};
use sluice_chain::{Chain, Sharing};
use sluice_nf::Event;
use sluice_packet::{Batch, PacketPool};
use sluice_state::LocalStore;

#[test]
fn http_mix_through_rule_files_alerts_once_per_request_and_response() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("web.rules");
    std::fs::write(
        &rules,
        "alert http $HOME_NET any -> $EXTERNAL_NET any (msg:\"get\"; http.method; content:\"GET\"; sid:1;)\n\
         alert http $EXTERNAL_NET any -> $HOME_NET any (msg:\"ok\"; http.stat_code; content:\"200\"; sid:2;)\n\
         alert tcp $EXTERNAL_NET any -> $HOME_NET any (msg:\"never\"; content:\"GET /\"; sid:3;)\n",
    )
    .unwrap();
    let (flows, requests) = (6, 3);
    let trace = http_trace(flows, requests, 4, 1);
    let spec = load_spec(dir.path(), &ips_files_chain(&[rules])).unwrap();
    let mut chain = Chain::from_spec(
        &spec,
        dir.path(),
        &sluice_builtin::registry(),
        Sharing::Shared,
    )
    .unwrap();
    assert!(
        chain.config_warnings().is_empty(),
        "{:?}",
        chain.config_warnings()
    );
    let mut store = LocalStore::new();
    let mut pool = PacketPool::new(64);
    let mut batch = Batch::with_capacity(32);
    for chunk in (0..trace.len()).collect::<Vec<_>>().chunks(32) {
        for &j in chunk {
            let (ts, f) = trace.get(j);
            batch.push_frame(&mut pool, f, ts, 0);
        }
        chain.process(&mut batch, &mut store);
        batch.recycle(&mut pool);
    }
    let st = chain.stats();
    assert_eq!(st.forwarded, trace.len() as u64, "{st:?}");
    let mut sids = [0usize; 4];
    for e in chain.take_events() {
        if let Event::Alert(a) = e {
            sids[a.sid as usize] += 1;
        }
    }
    assert_eq!(sids, [0, flows * requests, flows * requests, 0]);
}
