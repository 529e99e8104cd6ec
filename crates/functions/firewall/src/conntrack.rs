//! The connection-tracking record and the TCP state machine.

use sluice_state::{Codec, DecodeError, Reader, Writer};
use sluice_wire::tcp::flags::{ACK, FIN, RST, SYN};

/// Layout version of [`Conn`].
pub const CONN_VERSION: u8 = 1;
/// Encoded size of [`Conn`] in bytes.
pub const CONN_BYTES: usize = 11;

/// Connection states. TCP follows a simplified RFC 793 machine as seen from the
/// middle; UDP, ICMP echo and other protocols have a single tracked state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// SYN seen from the initiator.
    SynSent = 1,
    /// SYN-ACK seen from the responder.
    SynReceived = 2,
    /// Handshake completed.
    Established = 3,
    /// One side sent FIN (half-closed: FIN_WAIT / CLOSE_WAIT).
    FinWait = 4,
    /// Both sides sent FIN; waiting for the last ACK.
    LastAck = 5,
    /// Both FINs acknowledged.
    TimeWait = 6,
    /// Reset.
    Closed = 7,
    /// A UDP flow.
    Udp = 8,
    /// An ICMP echo exchange.
    IcmpEcho = 9,
    /// Another IP protocol.
    Other = 10,
}

impl State {
    fn from_u8(v: u8) -> Option<State> {
        Some(match v {
            1 => State::SynSent,
            2 => State::SynReceived,
            3 => State::Established,
            4 => State::FinWait,
            5 => State::LastAck,
            6 => State::TimeWait,
            7 => State::Closed,
            8 => State::Udp,
            9 => State::IcmpEcho,
            10 => State::Other,
            _ => return None,
        })
    }

    /// The stable lower-case name (for docs and debugging).
    pub fn name(self) -> &'static str {
        match self {
            State::SynSent => "syn_sent",
            State::SynReceived => "syn_received",
            State::Established => "established",
            State::FinWait => "fin_wait",
            State::LastAck => "last_ack",
            State::TimeWait => "time_wait",
            State::Closed => "closed",
            State::Udp => "udp",
            State::IcmpEcho => "icmp_echo",
            State::Other => "other",
        }
    }
}

/// Flag: the connection's initiator is the canonical key's destination side.
pub const INIT_REVERSE: u8 = 1;
/// Flag: the initiator sent FIN.
pub const FIN_INIT: u8 = 2;
/// Flag: the responder sent FIN.
pub const FIN_RESP: u8 = 4;

/// One tracked connection, stored under the canonical flow key.
///
/// Layout (11 bytes, little-endian): `[version=1][state][flags][last_seen_ns u64]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conn {
    /// Current state.
    pub state: State,
    /// [`INIT_REVERSE`], [`FIN_INIT`], [`FIN_RESP`].
    pub flags: u8,
    /// Time of the last packet that refreshed the record.
    pub last_seen_ns: u64,
}

impl Codec for Conn {
    #[inline]
    fn encode(&self, w: &mut Writer<'_>) {
        w.u8(CONN_VERSION)
            .u8(self.state as u8)
            .u8(self.flags)
            .u64(self.last_seen_ns);
    }
    #[inline]
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        if r.u8()? != CONN_VERSION {
            return Err(DecodeError("conntrack record version"));
        }
        let state = State::from_u8(r.u8()?).ok_or(DecodeError("conntrack state"))?;
        Ok(Conn {
            state,
            flags: r.u8()?,
            last_seen_ns: r.u64()?,
        })
    }
}

impl Conn {
    /// Advances a TCP connection by one segment with `flags`, sent by the initiator
    /// if `from_init`. Returns the new state and flags.
    pub fn tcp_step(&self, tcp_flags: u8, from_init: bool) -> (State, u8) {
        let mut st = self.state;
        let mut fl = self.flags;
        if tcp_flags & RST != 0 {
            return (State::Closed, fl);
        }
        match st {
            State::SynSent if !from_init && tcp_flags & (SYN | ACK) == SYN | ACK => {
                st = State::SynReceived;
            }
            State::SynReceived if from_init && tcp_flags & (SYN | ACK) == ACK => {
                st = State::Established;
            }
            State::LastAck if tcp_flags & (ACK | FIN) == ACK => st = State::TimeWait,
            _ => {}
        }
        if tcp_flags & FIN != 0
            && matches!(
                st,
                State::SynReceived | State::Established | State::FinWait | State::LastAck
            )
        {
            fl |= if from_init { FIN_INIT } else { FIN_RESP };
            st = if fl & (FIN_INIT | FIN_RESP) == FIN_INIT | FIN_RESP {
                State::LastAck
            } else {
                State::FinWait
            };
        }
        (st, fl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codec_round_trip_and_size() {
        let c = Conn {
            state: State::FinWait,
            flags: INIT_REVERSE | FIN_RESP,
            last_seen_ns: 123_456_789_000,
        };
        let mut buf = Vec::new();
        c.encode(&mut Writer::new(&mut buf));
        assert_eq!(buf.len(), CONN_BYTES);
        assert_eq!(Conn::decode(&mut Reader::new(&buf)).unwrap(), c);
        buf[1] = 99;
        assert!(Conn::decode(&mut Reader::new(&buf)).is_err());
        buf[0] = 2;
        assert!(Conn::decode(&mut Reader::new(&buf)).is_err());
    }

    #[test]
    fn handshake_and_teardown() {
        let mut c = Conn {
            state: State::SynSent,
            flags: 0,
            last_seen_ns: 0,
        };
        let mut step = |f: u8, init: bool| {
            (c.state, c.flags) = c.tcp_step(f, init);
            c.state
        };
        assert_eq!(step(SYN, true), State::SynSent);
        assert_eq!(step(ACK, false), State::SynSent, "an ACK is not a SYN-ACK");
        assert_eq!(step(SYN | ACK, false), State::SynReceived);
        assert_eq!(step(ACK, true), State::Established);
        assert_eq!(step(ACK | FIN, true), State::FinWait);
        assert_eq!(step(ACK, false), State::FinWait);
        assert_eq!(step(ACK | FIN, false), State::LastAck);
        assert_eq!(step(ACK, true), State::TimeWait);
        assert_eq!(step(RST, false), State::Closed);
    }
}
