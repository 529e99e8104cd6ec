//! Offloads, through the legacy `SIOCETHTOOL` commands (what `ethtool -K` does
//! for the same features), so no `ethtool` binary is needed.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::ns::{display, in_netns_opt};
use crate::NetnsError;

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GFEATURES: u32 = 0x3a;
const ETHTOOL_SFEATURES: u32 = 0x3b;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;

/// `struct ifreq` with the `ifr_data` member of its union.
#[repr(C)]
struct IfreqData {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

/// Runs the ethtool command whose request (starting with its `cmd` word) is
/// `buf`; the kernel writes its answer back into `buf`.
fn ethtool(fd: &OwnedFd, name: &[u8], buf: &mut [u8]) -> io::Result<()> {
    let mut req = IfreqData {
        name: [0; libc::IFNAMSIZ],
        data: buf.as_mut_ptr().cast(),
        _pad: [0; 16],
    };
    for (d, s) in req.name.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    // SAFETY: SIOCETHTOOL reads the name and, through ifr_data, a request of
    // the layout the command implies; every caller sizes `buf` for that layout
    // (header plus the element count it wrote), and the answer fits in it.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL, &mut req as *mut IfreqData) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn put(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn get(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_ne_bytes(b)
}

/// The device's feature names, in bit order (`ETH_SS_FEATURES`).
fn feature_names(fd: &OwnedFd, name: &[u8]) -> io::Result<Vec<String>> {
    // struct ethtool_sset_info: cmd, reserved, u64 sset_mask, u32 data[].
    let mut info = [0u8; 24];
    put(&mut info, 0, ETHTOOL_GSSET_INFO);
    info[8..16].copy_from_slice(&(1u64 << ETH_SS_FEATURES).to_ne_bytes());
    ethtool(fd, name, &mut info)?;
    let count = get(&info, 16) as usize;
    // struct ethtool_gstrings: cmd, string_set, len, u8 data[len * 32].
    let mut strings = vec![0u8; 12 + count * ETH_GSTRING_LEN];
    put(&mut strings, 0, ETHTOOL_GSTRINGS);
    put(&mut strings, 4, ETH_SS_FEATURES);
    put(&mut strings, 8, count as u32);
    ethtool(fd, name, &mut strings)?;
    Ok(strings[12..]
        .chunks(ETH_GSTRING_LEN)
        .map(|c| {
            let end = c.iter().position(|b| *b == 0).unwrap_or(c.len());
            String::from_utf8_lossy(&c[..end]).into_owned()
        })
        .collect())
}

/// The features active now, one bool per bit.
fn active(fd: &OwnedFd, name: &[u8], count: usize) -> io::Result<Vec<bool>> {
    let words = count.div_ceil(32);
    // struct ethtool_gfeatures: cmd, size, {available, requested, active,
    // never_changed}[size].
    let mut buf = vec![0u8; 8 + words * 16];
    put(&mut buf, 0, ETHTOOL_GFEATURES);
    put(&mut buf, 4, words as u32);
    ethtool(fd, name, &mut buf)?;
    Ok((0..count)
        .map(|i| get(&buf, 8 + (i / 32) * 16 + 8) & (1 << (i % 32)) != 0)
        .collect())
}

/// Asks for the features `off` (one bool per bit) to be off.
fn request_off(fd: &OwnedFd, name: &[u8], off: &[bool]) -> io::Result<()> {
    let words = off.len().div_ceil(32);
    // struct ethtool_sfeatures: cmd, size, {valid, requested}[size].
    let mut buf = vec![0u8; 8 + words * 8];
    put(&mut buf, 0, ETHTOOL_SFEATURES);
    put(&mut buf, 4, words as u32);
    for (i, _) in off.iter().enumerate().filter(|(_, o)| **o) {
        let at = 8 + (i / 32) * 8;
        let valid = get(&buf, at) | 1 << (i % 32);
        put(&mut buf, at, valid);
    }
    // A positive return (some request not fully met) is not an error here;
    // what is still on is checked afterwards.
    ethtool(fd, name, &mut buf)
}

/// The features `ethtool -K DEV tx off rx off tso off gso off gro off` turns
/// off, matched by name the way ethtool matches them (`tx` is
/// `tx-checksum-*`, `tso` is `tx-tcp*-segmentation`, ...).
fn turned_off(f: &str) -> bool {
    f.starts_with("tx-checksum-")
        || must_be_off(f)
        || ["rx-checksum", "tx-generic-segmentation", "rx-gro"].contains(&f)
}

/// Of those, the ones that must be off afterwards: transmit checksumming and
/// TCP segmentation (`tx-checksumming` and `tcp-segmentation-offload` in
/// `ethtool -k`).
fn must_be_off(f: &str) -> bool {
    f.starts_with("tx-checksum-") || (f.starts_with("tx-tcp") && f.ends_with("-segmentation"))
}

/// Turns off checksum and segmentation offloads (tx and rx checksumming, TSO,
/// GSO, GRO) on `dev` in namespace `ns` (`None`: the current one), as
/// `ethtool -K DEV tx off rx off tso off gso off gro off` does. A feature the
/// device cannot change is left as it is; only transmit checksumming or TSO
/// staying on is an error, since those are what would hand the reader
/// incomplete or oversized frames.
pub fn offloads_off(ns: Option<&str>, dev: &str) -> Result<(), NetnsError> {
    let name = dev.as_bytes();
    let fail = |feature: &str, err| NetnsError::Offload {
        ns: display(ns).to_string(),
        link: dev.to_string(),
        feature: feature.to_string(),
        err,
    };
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(fail(
            "offloads",
            io::Error::new(io::ErrorKind::InvalidInput, "bad interface name"),
        ));
    }
    in_netns_opt(ns, || {
        // SAFETY: socket(2) with constant arguments; the descriptor is owned below.
        let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(fail("offloads", io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let names = feature_names(&fd, name).map_err(|e| fail("offloads", e))?;
        let off: Vec<bool> = names.iter().map(|f| turned_off(f)).collect();
        let asked = request_off(&fd, name, &off);
        let now = active(&fd, name, names.len()).map_err(|e| fail("offloads", e))?;
        if let Some(f) = names
            .iter()
            .zip(&now)
            .find(|(f, on)| **on && must_be_off(f))
        {
            let err = match asked {
                Err(e) => e,
                Ok(()) => io::Error::other("still on"),
            };
            return Err(fail(f.0, err));
        }
        Ok(())
    })?
}
