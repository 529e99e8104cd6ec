use std::net::{Ipv4Addr, SocketAddrV4};

use super::*;
use crate::dataplane::{Sharding, ROUTER_MAC};

fn frame(sport: u16) -> Vec<u8> {
    let mut f = sluice_wire::build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], sport, 80, b"x");
    f[..6].copy_from_slice(&ROUTER_MAC);
    f
}

fn batch(n: u16) -> Vec<(Vec<u8>, Option<SocketAddrV4>)> {
    (0..n)
        .map(|i| {
            let src = SocketAddrV4::new(Ipv4Addr::new(192, 168, 0, 1), 10_000 + i);
            (frame(1000 + i), Some(src))
        })
        .collect()
}

fn links(n: usize, me: usize) -> (Vec<Option<Outbound>>, Vec<Option<Inbound>>) {
    let mut out = Vec::new();
    let mut inb = Vec::new();
    for s in 0..n {
        if s == me {
            out.push(None);
            inb.push(None);
        } else {
            let (o, i) = link();
            out.push(Some(o));
            inb.push(Some(i));
        }
    }
    (out, inb)
}

#[test]
fn a_batch_splits_into_own_frames_and_parcels_for_their_shards_in_order() {
    let b = batch(64);
    let (mut out, mut inb) = links(2, 0);
    let mut steer = Sharding::new(2);
    let mut mine = Vec::new();
    let shipped = split(
        &b,
        Origin::Udp,
        0,
        |f| steer.of_vm_frame(f),
        &mut mine,
        &mut out,
    );
    assert_eq!(shipped, 0, "the open parcel is not full yet");
    assert_eq!(flush_all(&mut out), 0b10);
    let p = inb[1]
        .as_mut()
        .unwrap()
        .take()
        .expect("a parcel for shard 1");
    assert_eq!(p.origin(), Origin::Udp);
    assert!(
        !mine.is_empty() && !p.is_empty(),
        "64 flows over 2 shards: {} and {}",
        mine.len(),
        p.len()
    );
    assert_eq!(mine.len() + p.len(), 64);
    // Shard 0's frames by index; shard 1's copied whole with their senders,
    // in the order they were received.
    let mut steer = Sharding::new(2);
    let theirs: Vec<usize> = (0..64)
        .filter(|&i| steer.of_vm_frame(&b[i].0) == 1)
        .collect();
    let ours: Vec<u32> = (0..64u32)
        .filter(|&i| steer.of_vm_frame(&b[i as usize].0) == 0)
        .collect();
    assert_eq!(mine, ours);
    for (k, &i) in theirs.iter().enumerate() {
        assert_eq!(p.frame(k), &b[i].0[..]);
        assert_eq!(p.src(k), b[i].1);
    }
    assert_eq!(out[1].as_ref().unwrap().handed(), p.len() as u64);
    assert!(inb[1].as_mut().unwrap().take().is_none());
}

#[test]
fn a_parcel_ships_when_full_or_when_the_origin_changes() {
    let (mut o, mut i) = link();
    let f = frame(1);
    for k in 0..PARCEL_FRAMES {
        assert!(!o.put(Origin::Vm(3), &f, None), "shipped after {k}");
    }
    // The 65th frame ships the full parcel and opens another.
    assert!(o.put(Origin::Vm(3), &f, None));
    // Another origin ships the one-frame parcel.
    assert!(o.put(Origin::Udp, &f, None));
    assert!(o.flush());
    assert!(!o.flush(), "nothing open");
    let sizes: Vec<(Origin, usize)> = std::iter::from_fn(|| i.take())
        .map(|p| (p.origin(), p.len()))
        .collect();
    assert_eq!(
        sizes,
        vec![
            (Origin::Vm(3), PARCEL_FRAMES),
            (Origin::Vm(3), 1),
            (Origin::Udp, 1)
        ]
    );
}

#[test]
fn a_link_holds_a_bounded_number_of_parcels_and_reuses_them() {
    let (mut o, mut i) = link();
    let f = frame(1);
    for _ in 0..PARCELS_PER_LINK {
        o.put(Origin::Udp, &f, None);
        assert!(o.flush());
    }
    // Every parcel is with the receiver: the next frame is dropped, counted.
    o.put(Origin::Udp, &f, None);
    assert_eq!(o.dropped(), 1);
    assert!(!o.flush());
    let taken: Vec<Parcel> = std::iter::from_fn(|| i.take()).collect();
    assert_eq!(taken.len(), PARCELS_PER_LINK);
    let bufs: Vec<*const u8> = taken.iter().map(|p| p.frame(0).as_ptr()).collect();
    for p in taken {
        i.give_back(p);
    }
    // Back at the sender, empty, with their buffers: no allocation.
    for _ in 0..PARCELS_PER_LINK {
        o.put(Origin::Udp, &f, None);
        assert!(o.flush());
    }
    assert_eq!(o.dropped(), 1);
    let again: Vec<*const u8> = std::iter::from_fn(|| i.take())
        .map(|p| {
            assert_eq!(p.len(), 1, "a returned parcel starts empty");
            p.frame(0).as_ptr()
        })
        .collect();
    let mut a = bufs.clone();
    let mut b = again.clone();
    a.sort();
    b.sort();
    assert_eq!(a, b, "the same buffers went round");
}

#[test]
fn a_subset_is_a_batch_of_the_chosen_frames() {
    let mut b = batch(5);
    let idx = [1u32, 3, 4];
    let mut s = Subset::new(&mut b, &idx);
    assert_eq!(s.count(), 3);
    assert_eq!(s.src(1).unwrap().port(), 10_003);
    s.frame_mut(2)[0] = 0xee;
    assert_eq!(s.frame(0), &frame(1001)[..]);
    assert_eq!(b[4].0[0], 0xee, "written in place");
}

#[test]
fn one_thread_keeps_everything() {
    let b = batch(10);
    let (mut out, _inb) = links(1, 0);
    let mut mine = Vec::new();
    assert_eq!(split(&b, Origin::Udp, 0, |_| 0, &mut mine, &mut out), 0);
    assert_eq!(mine, (0..10).collect::<Vec<u32>>());
    // A shard out of range (or without a link) keeps its frames here rather
    // than losing them.
    split(&b, Origin::Udp, 0, |_| 7, &mut mine, &mut out);
    assert_eq!(mine.len(), 10);
}
