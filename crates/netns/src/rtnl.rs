//! An rtnetlink socket in one namespace: links, addresses, routes, neighbours.

use std::cell::Cell;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL,
    NLM_F_REPLACE, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage, AddressScope};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteProtocol, RouteScope,
    RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use crate::ns::{display, in_netns_opt, open};
use crate::NetnsError;

/// A link as read back from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Interface index.
    pub index: u32,
    /// Interface name.
    pub name: String,
    /// MTU.
    pub mtu: u32,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Hardware address (empty when the link has none).
    pub mac: Vec<u8>,
    /// Index of the bridge (or other master) it is enslaved to.
    pub master: Option<u32>,
    /// Link kind (`veth`, `bridge`, ...) where the kernel reports one.
    pub kind: Option<String>,
}

/// An IPv4 route to add (`ip route add DST [via GW] dev DEV [onlink] [src SRC]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Destination and prefix length (`0.0.0.0/0` for the default route).
    pub dst: (Ipv4Addr, u8),
    /// Gateway, if any; without one the route is on-link (scope link).
    pub via: Option<Ipv4Addr>,
    /// Output interface.
    pub dev: String,
    /// Treat the gateway as on-link even though no address covers it.
    pub onlink: bool,
    /// Preferred source address.
    pub src: Option<Ipv4Addr>,
}

/// A route of the main table as read back from the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteEntry {
    /// Destination and prefix length.
    pub dst: (Ipv4Addr, u8),
    /// Gateway, if any.
    pub via: Option<Ipv4Addr>,
    /// Output interface index, if any.
    pub oif: Option<u32>,
}

/// An rtnetlink socket opened in one network namespace. Requests are answered
/// synchronously (one at a time, each acknowledged or failed by the kernel).
#[derive(Debug)]
pub struct Rtnl {
    sock: Socket,
    ns: Option<String>,
    seq: Cell<u32>,
}

impl Rtnl {
    /// Opens a socket in namespace `ns` (`None`: the calling thread's).
    pub fn open(ns: Option<&str>) -> Result<Rtnl, NetnsError> {
        let shown = display(ns).to_string();
        let sock_err = |err| NetnsError::Netlink {
            ns: shown.clone(),
            op: "open".into(),
            target: "rtnetlink socket".into(),
            err,
        };
        let mut sock = in_netns_opt(ns, || Socket::new(NETLINK_ROUTE))?.map_err(sock_err)?;
        sock.bind_auto().map_err(sock_err)?;
        sock.connect(&SocketAddr::new(0, 0)).map_err(sock_err)?;
        Ok(Rtnl {
            sock,
            ns: ns.map(str::to_string),
            seq: Cell::new(0),
        })
    }

    fn err(&self, op: impl Into<String>, target: &str, err: io::Error) -> NetnsError {
        NetnsError::Netlink {
            ns: display(self.ns.as_deref()).to_string(),
            op: op.into(),
            target: target.to_string(),
            err,
        }
    }

    /// Sends `msg` with `flags` and collects the answer: the messages of a dump,
    /// or the reply (if any) to anything else. Every request asks for an
    /// acknowledgement, since a plain `GET` would otherwise leave no end marker
    /// to wait for.
    fn request(
        &self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> io::Result<Vec<RouteNetlinkMessage>> {
        let seq = self.seq.get().wrapping_add(1);
        self.seq.set(seq);
        let mut packet = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::from(msg));
        packet.header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        packet.header.sequence_number = seq;
        packet.finalize();
        let mut buf = vec![0; packet.buffer_len()];
        packet.serialize(&mut buf);
        self.sock.send(&buf, 0)?;
        let mut out = Vec::new();
        loop {
            let (data, _) = self.sock.recv_from_full()?;
            let mut off = 0;
            while off < data.len() {
                let m: NetlinkMessage<RouteNetlinkMessage> =
                    NetlinkMessage::deserialize(&data[off..])
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                let len = m.header.length as usize;
                if m.header.sequence_number == seq {
                    match m.payload {
                        NetlinkPayload::Done(_) => return Ok(out),
                        NetlinkPayload::Error(e) => {
                            return match e.code {
                                None => Ok(out),
                                Some(_) => Err(e.to_io()),
                            };
                        }
                        NetlinkPayload::InnerMessage(inner) => out.push(inner),
                        _ => {}
                    }
                }
                if len == 0 {
                    break;
                }
                off += len;
            }
        }
    }

    /// An acknowledged change.
    fn change(
        &self,
        msg: RouteNetlinkMessage,
        flags: u16,
        op: &str,
        target: &str,
    ) -> Result<(), NetnsError> {
        self.request(msg, flags)
            .map(|_| ())
            .map_err(|e| self.err(op, target, e))
    }

    /// Every link in the namespace.
    pub fn links(&self) -> Result<Vec<Link>, NetnsError> {
        let msgs = self
            .request(
                RouteNetlinkMessage::GetLink(LinkMessage::default()),
                NLM_F_DUMP,
            )
            .map_err(|e| self.err("list", "links", e))?;
        Ok(msgs
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(to_link(&l)),
                _ => None,
            })
            .collect())
    }

    /// The link called `name`.
    pub fn link(&self, name: &str) -> Result<Link, NetnsError> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        let msgs = self
            .request(RouteNetlinkMessage::GetLink(msg), 0)
            .map_err(|e| self.err("look up", name, e))?;
        msgs.iter()
            .find_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(to_link(l)),
                _ => None,
            })
            .ok_or_else(|| self.err("look up", name, io::ErrorKind::NotFound.into()))
    }

    /// The interface index of `name`.
    pub fn index(&self, name: &str) -> Result<u32, NetnsError> {
        self.link(name).map(|l| l.index)
    }

    /// A link message addressing `name` by index.
    fn by_name(&self, name: &str, op: &str) -> Result<LinkMessage, NetnsError> {
        let index = self
            .link(name)
            .map_err(|e| match e {
                NetnsError::Netlink { err, .. } => self.err(op, name, err),
                other => other,
            })?
            .index;
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        Ok(msg)
    }

    fn set_link(&self, msg: LinkMessage, op: &str, name: &str) -> Result<(), NetnsError> {
        self.change(RouteNetlinkMessage::SetLink(msg), 0, op, name)
    }

    /// Creates a veth pair `name` / `peer`, `name` here and `peer` in namespace
    /// `peer_ns` (`None`: here too). Both ends start down.
    pub fn add_veth(
        &self,
        name: &str,
        peer: &str,
        peer_ns: Option<&str>,
    ) -> Result<(), NetnsError> {
        let peer_file = peer_ns.map(open).transpose()?;
        let mut p = LinkMessage::default();
        p.attributes.push(LinkAttribute::IfName(peer.to_string()));
        if let Some(f) = &peer_file {
            p.attributes.push(LinkAttribute::NetNsFd(f.as_raw_fd()));
        }
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(p))),
        ]));
        let op = format!("add veth pair with peer {peer} (in {})", display(peer_ns));
        self.change(
            RouteNetlinkMessage::NewLink(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            &op,
            name,
        )
    }

    /// Creates a bridge `name` (down).
    pub fn add_bridge(&self, name: &str) -> Result<(), NetnsError> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        msg.attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
                InfoKind::Bridge,
            )]));
        self.change(
            RouteNetlinkMessage::NewLink(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            "add bridge",
            name,
        )
    }

    /// Deletes link `name` (a veth pair goes whole).
    pub fn del_link(&self, name: &str) -> Result<(), NetnsError> {
        let msg = self.by_name(name, "delete")?;
        self.change(RouteNetlinkMessage::DelLink(msg), 0, "delete", name)
    }

    /// Brings `name` up or down.
    pub fn set_up(&self, name: &str, up: bool) -> Result<(), NetnsError> {
        let op = if up { "set up" } else { "set down" };
        let mut msg = self.by_name(name, op)?;
        msg.header.change_mask = LinkFlags::Up;
        if up {
            msg.header.flags = LinkFlags::Up;
        }
        self.set_link(msg, op, name)
    }

    /// Sets the MTU of `name`.
    pub fn set_mtu(&self, name: &str, mtu: u32) -> Result<(), NetnsError> {
        let op = format!("set mtu {mtu} on");
        let mut msg = self.by_name(name, &op)?;
        msg.attributes.push(LinkAttribute::Mtu(mtu));
        self.set_link(msg, &op, name)
    }

    /// Sets the hardware address of `name`.
    pub fn set_mac(&self, name: &str, mac: [u8; 6]) -> Result<(), NetnsError> {
        let op = format!("set address {} on", fmt_mac(&mac));
        let mut msg = self.by_name(name, &op)?;
        msg.attributes.push(LinkAttribute::Address(mac.to_vec()));
        self.set_link(msg, &op, name)
    }

    /// Renames `name` to `new` (the link must be down).
    pub fn rename(&self, name: &str, new: &str) -> Result<(), NetnsError> {
        let op = format!("rename to {new}");
        let mut msg = self.by_name(name, &op)?;
        msg.attributes.push(LinkAttribute::IfName(new.to_string()));
        self.set_link(msg, &op, name)
    }

    /// Moves `name` into namespace `ns` (it goes down there).
    pub fn move_to(&self, name: &str, ns: &str) -> Result<(), NetnsError> {
        let op = format!("move to namespace {ns}");
        let file = open(ns)?;
        let mut msg = self.by_name(name, &op)?;
        msg.attributes
            .push(LinkAttribute::NetNsFd(file.as_raw_fd()));
        self.set_link(msg, &op, name)
    }

    /// Enslaves `name` to bridge `master`.
    pub fn set_master(&self, name: &str, master: &str) -> Result<(), NetnsError> {
        let op = format!("attach to {master}");
        let m = self.index(master)?;
        let mut msg = self.by_name(name, &op)?;
        msg.attributes.push(LinkAttribute::Controller(m));
        self.set_link(msg, &op, name)
    }

    /// Adds `addr/len` to `dev`.
    pub fn add_addr(&self, dev: &str, addr: Ipv4Addr, len: u8) -> Result<(), NetnsError> {
        let op = format!("add address {addr}/{len} to");
        let index = self.by_name(dev, &op)?.header.index;
        let mut msg = AddressMessage::default();
        msg.header.family = AddressFamily::Inet;
        msg.header.prefix_len = len;
        msg.header.scope = AddressScope::Universe;
        msg.header.index = index;
        let a = IpAddr::V4(addr);
        msg.attributes.push(AddressAttribute::Local(a));
        msg.attributes.push(AddressAttribute::Address(a));
        if len < 31 {
            let host = u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
            let brd = Ipv4Addr::from(u32::from(addr) | host);
            msg.attributes.push(AddressAttribute::Broadcast(brd));
        }
        self.change(
            RouteNetlinkMessage::NewAddress(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            &op,
            dev,
        )
    }

    /// The IPv4 addresses on `dev`, with their prefix lengths.
    pub fn addrs(&self, dev: &str) -> Result<Vec<(Ipv4Addr, u8)>, NetnsError> {
        let index = self.index(dev)?;
        let mut req = AddressMessage::default();
        req.header.family = AddressFamily::Inet;
        let msgs = self
            .request(RouteNetlinkMessage::GetAddress(req), NLM_F_DUMP)
            .map_err(|e| self.err("list addresses of", dev, e))?;
        Ok(msgs
            .iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewAddress(a) if a.header.index == index => {
                    a.attributes.iter().find_map(|at| match at {
                        AddressAttribute::Local(IpAddr::V4(v4)) => Some((*v4, a.header.prefix_len)),
                        _ => None,
                    })
                }
                _ => None,
            })
            .collect())
    }

    /// Removes every IPv4 address from `dev`.
    pub fn flush_addrs(&self, dev: &str) -> Result<(), NetnsError> {
        let index = self.index(dev)?;
        for (a, len) in self.addrs(dev)? {
            let mut msg = AddressMessage::default();
            msg.header.family = AddressFamily::Inet;
            msg.header.prefix_len = len;
            msg.header.index = index;
            msg.attributes.push(AddressAttribute::Local(IpAddr::V4(a)));
            let op = format!("delete address {a}/{len} from");
            self.change(RouteNetlinkMessage::DelAddress(msg), 0, &op, dev)?;
        }
        Ok(())
    }

    /// Adds an IPv4 route to the main table.
    pub fn add_route(&self, r: &Route) -> Result<(), NetnsError> {
        let (dst, len) = r.dst;
        let mut op = format!("add route {dst}/{len}");
        if let Some(g) = r.via {
            op.push_str(&format!(" via {g}"));
        }
        op.push_str(" dev");
        let index = self.by_name(&r.dev, &op)?.header.index;
        let mut msg = RouteMessage::default();
        msg.header = route_header(len);
        msg.header.scope = if r.via.is_some() {
            RouteScope::Universe
        } else {
            RouteScope::Link
        };
        if r.onlink {
            msg.header.flags = RouteFlags::Onlink;
        }
        if len > 0 {
            msg.attributes
                .push(RouteAttribute::Destination(RouteAddress::Inet(dst)));
        }
        if let Some(g) = r.via {
            msg.attributes
                .push(RouteAttribute::Gateway(RouteAddress::Inet(g)));
        }
        if let Some(s) = r.src {
            msg.attributes
                .push(RouteAttribute::PrefSource(RouteAddress::Inet(s)));
        }
        msg.attributes.push(RouteAttribute::Oif(index));
        self.change(
            RouteNetlinkMessage::NewRoute(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            &op,
            &r.dev,
        )
    }

    /// Adds or replaces a permanent neighbour entry `ip` -> `mac` on `dev`.
    pub fn replace_neigh(&self, dev: &str, ip: Ipv4Addr, mac: [u8; 6]) -> Result<(), NetnsError> {
        let op = format!("set neighbour {ip} lladdr {} on", fmt_mac(&mac));
        let index = self.by_name(dev, &op)?.header.index;
        let mut msg = NeighbourMessage::default();
        msg.header.family = AddressFamily::Inet;
        msg.header.ifindex = index;
        msg.header.state = NeighbourState::Permanent;
        msg.attributes
            .push(NeighbourAttribute::Destination(NeighbourAddress::Inet(ip)));
        msg.attributes
            .push(NeighbourAttribute::LinkLayerAddress(mac.to_vec()));
        self.change(
            RouteNetlinkMessage::NewNeighbour(msg),
            NLM_F_CREATE | NLM_F_REPLACE,
            &op,
            dev,
        )
    }

    /// The IPv4 routes of the main table.
    pub fn routes(&self) -> Result<Vec<RouteEntry>, NetnsError> {
        let mut req = RouteMessage::default();
        req.header.address_family = AddressFamily::Inet;
        let msgs = self
            .request(RouteNetlinkMessage::GetRoute(req), NLM_F_DUMP)
            .map_err(|e| self.err("list", "routes", e))?;
        Ok(msgs
            .iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewRoute(r)
                    if r.header.table == RouteHeader::RT_TABLE_MAIN =>
                {
                    let mut dst = Ipv4Addr::UNSPECIFIED;
                    let (mut gw, mut oif) = (None, None);
                    for a in &r.attributes {
                        match a {
                            RouteAttribute::Destination(RouteAddress::Inet(d)) => dst = *d,
                            RouteAttribute::Gateway(RouteAddress::Inet(g)) => gw = Some(*g),
                            RouteAttribute::Oif(i) => oif = Some(*i),
                            _ => {}
                        }
                    }
                    Some(RouteEntry {
                        dst: (dst, r.header.destination_prefix_length),
                        via: gw,
                        oif,
                    })
                }
                _ => None,
            })
            .collect())
    }
}

fn route_header(len: u8) -> RouteHeader {
    RouteHeader {
        address_family: AddressFamily::Inet,
        destination_prefix_length: len,
        table: RouteHeader::RT_TABLE_MAIN,
        protocol: RouteProtocol::Boot,
        kind: RouteType::Unicast,
        ..Default::default()
    }
}

fn to_link(l: &LinkMessage) -> Link {
    let mut link = Link {
        index: l.header.index,
        name: String::new(),
        mtu: 0,
        up: l.header.flags.contains(LinkFlags::Up),
        mac: Vec::new(),
        master: None,
        kind: None,
    };
    for a in &l.attributes {
        match a {
            LinkAttribute::IfName(n) => link.name.clone_from(n),
            LinkAttribute::Mtu(m) => link.mtu = *m,
            LinkAttribute::Address(m) => link.mac.clone_from(m),
            LinkAttribute::Controller(m) => link.master = Some(*m),
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    if let LinkInfo::Kind(k) = i {
                        link.kind = Some(k.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    link
}

/// Formats a hardware address as `aa:bb:cc:dd:ee:ff`.
pub fn fmt_mac(mac: &[u8]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}
