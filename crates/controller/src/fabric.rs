//! Keys of the authenticated encapsulation between hosts (docs/SECURITY.md,
//! "The fabric"): one random fabric secret per key id, kept in the store, and
//! per ordered host pair `(from, to)` the AES-256-GCM key
//! `HKDF-SHA256(salt "sluice fabric auth v1", secret, info "sluice fabric key" ||
//! id || from || to)`. Each host gets only the keys of its own links (what it
//! sends to each peer, what each peer sends to it), never the secret, so a
//! compromised host can forge nothing between two other hosts.
//!
//! A rotation has two steps so that no datagram is sealed under a key its
//! receiver does not hold yet: [`FabricSecret::rotate`] adds the new id, which
//! every host then accepts while still sealing with the old one; once every
//! agent runs that configuration, [`FabricSecret::finish_rotation`] makes hosts
//! seal with the new id and forget the old.

use ring::hkdf;
use sluice_proto::{FabricAuth, FabricKey, PeerKeys};

/// The fabric's secrets and which one hosts seal with.
#[derive(Clone, PartialEq, Eq)]
pub struct FabricSecret {
    /// Live secrets by key id, oldest first: one, or two during a rotation.
    pub secrets: Vec<(u8, [u8; 32])>,
    /// The key id hosts seal with.
    pub sending: u8,
}

impl std::fmt::Debug for FabricSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret itself (logs, panics, test output).
        let ids: Vec<u8> = self.secrets.iter().map(|s| s.0).collect();
        f.debug_struct("FabricSecret")
            .field("ids", &ids)
            .field("sending", &self.sending)
            .finish()
    }
}

/// The AES-256-GCM key of the link from host `from` to host `to` under `secret`.
pub fn derive_key(secret: &[u8; 32], id: u8, from: u32, to: u32) -> [u8; 32] {
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"sluice fabric auth v1").extract(secret);
    let (f, t) = (from.to_be_bytes(), to.to_be_bytes());
    let info: [&[u8]; 4] = [b"sluice fabric key", &[id], &f, &t];
    let mut out = [0u8; 32];
    // 32 bytes is HKDF-SHA256's own length: expand and fill cannot fail.
    if let Ok(okm) = prk.expand(&info, hkdf::HKDF_SHA256) {
        let _ = okm.fill(&mut out);
    }
    out
}

fn hex(k: &[u8; 32]) -> String {
    k.iter().map(|b| format!("{b:02x}")).collect()
}

impl FabricSecret {
    /// A fabric whose only secret is `secret`, key id 1.
    pub fn new(secret: [u8; 32]) -> FabricSecret {
        FabricSecret {
            secrets: vec![(1, secret)],
            sending: 1,
        }
    }

    /// Starts a rotation to `secret` (the next key id): hosts accept both,
    /// and still seal with the current one. A rotation under way is finished
    /// first.
    pub fn rotate(&mut self, secret: [u8; 32]) {
        self.finish_rotation();
        let id = match self.sending.wrapping_add(1) {
            0 => 1,
            n => n,
        };
        self.secrets.push((id, secret));
    }

    /// Finishes a rotation: hosts seal with the newest id and forget the
    /// older one.
    pub fn finish_rotation(&mut self) {
        if let Some(&(id, s)) = self.secrets.last() {
            self.secrets = vec![(id, s)];
            self.sending = id;
        }
    }

    /// What host `host` needs for its links with `peers` (itself skipped).
    pub fn keys_for(&self, host: u32, peers: impl IntoIterator<Item = u32>) -> FabricAuth {
        let key = |id: u8, from: u32, to: u32| {
            self.secrets.iter().find(|s| s.0 == id).map(|s| FabricKey {
                id,
                key: hex(&derive_key(&s.1, id, from, to)),
            })
        };
        FabricAuth {
            peers: peers
                .into_iter()
                .filter(|&p| p != host)
                .filter_map(|p| {
                    Some(PeerKeys {
                        host: p,
                        tx: key(self.sending, host, p)?,
                        // Newest first: the one most datagrams come under.
                        rx: self
                            .secrets
                            .iter()
                            .rev()
                            .filter_map(|s| key(s.0, p, host))
                            .collect(),
                    })
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_end_of_a_link_gets_the_same_key_and_nothing_else() {
        let f = FabricSecret::new([7; 32]);
        let a = f.keys_for(1, [1, 2, 3]);
        let b = f.keys_for(2, [1, 2, 3]);
        assert_eq!(a.peers.len(), 2, "no link to itself");
        let a_to_b = &a.peers.iter().find(|p| p.host == 2).unwrap().tx;
        let b_from_a = &b.peers.iter().find(|p| p.host == 1).unwrap().rx[0];
        assert_eq!(a_to_b, b_from_a);
        // Each direction, each pair and each secret has its own key.
        let b_to_a = &b.peers.iter().find(|p| p.host == 1).unwrap().tx;
        assert_ne!(a_to_b.key, b_to_a.key);
        let a_to_c = &a.peers.iter().find(|p| p.host == 3).unwrap().tx;
        assert_ne!(a_to_b.key, a_to_c.key);
        let other = FabricSecret::new([8; 32]).keys_for(1, [2]);
        assert_ne!(other.peers[0].tx.key, a_to_b.key);
        // Host 3 holds nothing of the link between 1 and 2.
        let c = f.keys_for(3, [1, 2, 3]);
        for p in &c.peers {
            assert_ne!(p.tx.key, a_to_b.key);
            assert!(p.rx.iter().all(|k| k.key != a_to_b.key));
        }
        assert_eq!(a_to_b.key.len(), 64);
        assert!(!format!("{f:?}").contains("7, 7"), "secret in Debug");
    }

    #[test]
    fn a_rotation_accepts_both_before_sealing_with_the_new() {
        let mut f = FabricSecret::new([7; 32]);
        let before = f.keys_for(1, [2]).peers[0].clone();
        f.rotate([9; 32]);
        let during = f.keys_for(1, [2]).peers[0].clone();
        assert_eq!(during.tx, before.tx, "still sealing with the old id");
        let ids: Vec<u8> = during.rx.iter().map(|k| k.id).collect();
        assert_eq!(ids, vec![2, 1]);
        assert_eq!(during.rx[1], before.rx[0]);
        f.finish_rotation();
        let after = f.keys_for(1, [2]).peers[0].clone();
        assert_eq!(after.tx.id, 2);
        assert_eq!(after.tx, {
            let mut k = during.tx.clone();
            k.id = 2;
            k.key = hex(&derive_key(&[9; 32], 2, 1, 2));
            k
        });
        assert_eq!(after.rx, vec![during.rx[0].clone()]);
    }
}
