//! IP address prefixes (`10.0.0.0/8`, `2001:db8::/32`).

use core::fmt;

use crate::IpAddr;

/// An address prefix: an address and how many leading bits of it count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

impl Prefix {
    /// A prefix of `len` bits of `addr`, if `len` fits the address family.
    pub fn new(addr: IpAddr, len: u8) -> Option<Prefix> {
        (len <= if addr.is_v4() { 32 } else { 128 }).then_some(Prefix { addr, len })
    }

    /// Parses `ADDR/LEN` or a bare address (a host prefix). The error names the text.
    pub fn parse(s: &str) -> Result<Prefix, String> {
        let (a, l) = s.split_once('/').map_or((s, None), |(a, l)| (a, Some(l)));
        let addr: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("`{s}`: not an IP address or prefix"))?;
        let max = if addr.is_v4() { 32 } else { 128 };
        let len = match l {
            Some(l) => l
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| format!("`{s}`: bad prefix length"))?,
            None => max,
        };
        Ok(Prefix { addr, len })
    }

    /// The address as written (its host bits are ignored by [`Prefix::contains`]).
    pub fn network(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn len(&self) -> u8 {
        self.len
    }

    /// True for a zero-length prefix (every address of its family).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True if `a` lies inside the prefix.
    #[inline]
    pub fn contains(&self, a: &IpAddr) -> bool {
        if a.is_v4() != self.addr.is_v4() {
            return false;
        }
        let (x, y) = (a.as_bytes(), self.addr.as_bytes());
        let full = (self.len / 8) as usize;
        if x[..full] != y[..full] {
            return false;
        }
        let rem = self.len % 8;
        rem == 0 || (x[full] ^ y[full]) & (0xffu8 << (8 - rem)) == 0
    }

    /// True if the two prefixes share an address.
    pub fn overlaps(&self, o: &Prefix) -> bool {
        self.contains(&o.addr) || o.contains(&self.addr)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl std::str::FromStr for Prefix {
    type Err = String;
    fn from_str(s: &str) -> Result<Prefix, String> {
        Prefix::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_contains_overlap() {
        let p = Prefix::parse("10.128.0.0/9").unwrap();
        assert!(p.contains(&IpAddr::V4([10, 200, 1, 1])));
        assert!(!p.contains(&IpAddr::V4([10, 127, 1, 1])));
        assert!(Prefix::parse("0.0.0.0/0")
            .unwrap()
            .contains(&IpAddr::V4([1, 2, 3, 4])));
        assert!(!p.contains(&"2001:db8::1".parse().unwrap()));
        let v6 = Prefix::parse("2001:db8::/32").unwrap();
        assert!(v6.contains(&"2001:db8:ff::1".parse().unwrap()));
        assert!(p.overlaps(&Prefix::parse("10.130.0.0/16").unwrap()));
        assert!(!p.overlaps(&Prefix::parse("10.0.0.0/9").unwrap()));
        assert_eq!(Prefix::parse("10.0.0.1").unwrap().len(), 32);
        assert!(Prefix::parse("10.0.0.0/33").is_err());
        assert!(Prefix::parse("x/8").unwrap_err().contains("x/8"));
        assert_eq!(p.to_string(), "10.128.0.0/9");
    }
}
