//! Named network namespaces, and running code inside one.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::{NetnsError, Rtnl, CURRENT};

/// Where named namespaces live (as with `ip netns`).
pub const NETNS_RUN_DIR: &str = "/run/netns";

fn check_name(name: &str) -> Result<(), NetnsError> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." || name.contains('\0') {
        return Err(NetnsError::BadName(name.to_string()));
    }
    Ok(())
}

fn path_of(name: &str) -> PathBuf {
    Path::new(NETNS_RUN_DIR).join(name)
}

fn ns_err(ns: &str, op: impl Into<String>, err: io::Error) -> NetnsError {
    NetnsError::Namespace {
        ns: ns.to_string(),
        op: op.into(),
        err,
    }
}

fn cstr(p: &Path) -> CString {
    // Paths built from checked names hold no NUL.
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

/// Opens the namespace file of `name` (for `setns(2)` or `IFLA_NET_NS_FD`).
pub(crate) fn open(name: &str) -> Result<File, NetnsError> {
    check_name(name)?;
    let path = path_of(name);
    File::open(&path).map_err(|e| ns_err(name, format!("open {}", path.display()), e))
}

/// Makes [`NETNS_RUN_DIR`] a shared mount point, as `ip netns add` does, so that
/// namespaces mounted on it appear in every mount namespace that shares it.
fn share_run_dir(name: &str) -> Result<(), NetnsError> {
    std::fs::create_dir_all(NETNS_RUN_DIR)
        .map_err(|e| ns_err(name, format!("create {NETNS_RUN_DIR}"), e))?;
    let dir = cstr(Path::new(NETNS_RUN_DIR));
    let none = c"none";
    // SAFETY: mount(2) with valid NUL-terminated strings and no data.
    let shared = |flags| unsafe {
        libc::mount(
            none.as_ptr(),
            dir.as_ptr(),
            none.as_ptr(),
            flags,
            std::ptr::null(),
        )
    };
    if shared(libc::MS_SHARED | libc::MS_REC) == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EINVAL) {
        return Err(ns_err(name, format!("make {NETNS_RUN_DIR} shared"), e));
    }
    // EINVAL: not a mount point yet; bind it onto itself, then share it.
    // SAFETY: as above.
    let r = unsafe {
        libc::mount(
            dir.as_ptr(),
            dir.as_ptr(),
            none.as_ptr(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        return Err(ns_err(name, format!("bind-mount {NETNS_RUN_DIR}"), e));
    }
    if shared(libc::MS_SHARED | libc::MS_REC) != 0 {
        let e = io::Error::last_os_error();
        return Err(ns_err(name, format!("make {NETNS_RUN_DIR} shared"), e));
    }
    Ok(())
}

/// Creates the network namespace `name` (`/run/netns/NAME`, as `ip netns add`
/// does). Fails if it exists. Its loopback is left down, as `ip netns add`
/// leaves it.
pub fn create(name: &str) -> Result<(), NetnsError> {
    check_name(name)?;
    share_run_dir(name)?;
    let path = path_of(name);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| ns_err(name, format!("create {}", path.display()), e))?;
    let target = cstr(&path);
    // unshare(2) moves only the calling thread into the new namespace, so a
    // throwaway thread makes it and pins it with a bind mount before ending.
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: unshare affects only this thread, which ends right after.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(ns_err(name, "unshare", io::Error::last_os_error()));
            }
            let src = c"/proc/thread-self/ns/net";
            let none = c"none";
            // SAFETY: mount(2) with valid NUL-terminated strings and no data.
            let r = unsafe {
                libc::mount(
                    src.as_ptr(),
                    target.as_ptr(),
                    none.as_ptr(),
                    libc::MS_BIND,
                    std::ptr::null(),
                )
            };
            if r != 0 {
                let e = io::Error::last_os_error();
                return Err(ns_err(name, format!("bind-mount on {}", path.display()), e));
            }
            Ok(())
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    });
    if r.is_err() {
        let _ = std::fs::remove_file(&path);
    }
    r
}

/// Deletes the network namespace `name` (unmounts and removes
/// `/run/netns/NAME`, as `ip netns del` does). Its interfaces go when the last
/// process or socket in it does.
pub fn delete(name: &str) -> Result<(), NetnsError> {
    check_name(name)?;
    let path = path_of(name);
    if !path.exists() {
        return Err(ns_err(
            name,
            "delete",
            io::Error::from(io::ErrorKind::NotFound),
        ));
    }
    let p = cstr(&path);
    // SAFETY: umount2(2) on a valid path. EINVAL (not a mount point, e.g. a
    // half-made namespace) still leaves the file to remove.
    if unsafe { libc::umount2(p.as_ptr(), libc::MNT_DETACH) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(ns_err(name, format!("unmount {}", path.display()), e));
        }
    }
    std::fs::remove_file(&path).map_err(|e| ns_err(name, format!("remove {}", path.display()), e))
}

/// The names of the namespaces in [`NETNS_RUN_DIR`] (none if it does not exist).
pub fn list() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(NETNS_RUN_DIR) else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// True if a namespace called `name` exists.
pub fn exists(name: &str) -> bool {
    check_name(name).is_ok() && path_of(name).exists()
}

/// Runs `f` on a fresh thread that joined the network namespace `name` (as made
/// by [`create`] or `ip netns add`) and returns its result. A socket keeps the
/// namespace it was created in, so sockets `f` opens can be used from any
/// thread afterwards. The calling thread's namespace is untouched; a panic in
/// `f` is passed on.
pub fn in_netns<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> Result<T, NetnsError> {
    let file = open(name)?;
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: setns on a valid namespace descriptor; it changes only this
            // thread, which ends when `f` returns.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(ns_err(name, "setns", io::Error::last_os_error()));
            }
            Ok(f())
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// [`in_netns`] when a namespace is given, else `f` on the calling thread.
pub fn in_netns_opt<T: Send>(
    name: Option<&str>,
    f: impl FnOnce() -> T + Send,
) -> Result<T, NetnsError> {
    match name {
        Some(n) => in_netns(n, f),
        None => Ok(f()),
    }
}

/// How a namespace is named in messages (`None` is the current one).
pub(crate) fn display(ns: Option<&str>) -> &str {
    ns.unwrap_or(CURRENT)
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A short unique name (`sl<pid><n><suffix>`, at most 15 bytes as interface names
/// require), so concurrent tests and runs never collide.
pub fn unique_name(suffix: &str) -> String {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut s = format!("sl{}{}{}", std::process::id() % 100_000, n, suffix);
    s.truncate(15);
    s
}

/// A network namespace, deleted (with every interface in it) on drop unless
/// [`Netns::keep`] is called.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates a namespace with a unique name ending in `tag` (see
    /// [`unique_name`]), with loopback up.
    pub fn new(tag: &str) -> Result<Netns, NetnsError> {
        Netns::create(&unique_name(tag))
    }

    /// Creates a namespace with exactly this name, with loopback up.
    pub fn create(name: &str) -> Result<Netns, NetnsError> {
        create(name)?;
        // From here on, dropping the handle removes the namespace.
        let ns = Netns {
            name: name.to_string(),
        };
        ns.rtnl()?.set_up("lo", true)?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// An rtnetlink socket in this namespace.
    pub fn rtnl(&self) -> Result<Rtnl, NetnsError> {
        Rtnl::open(Some(&self.name))
    }

    /// Runs `f` on a thread that joined this namespace, and returns its result
    /// (see [`in_netns`]).
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, NetnsError> {
        in_netns(&self.name, f)
    }

    /// Adds `cidr` (`a.b.c.d/len`) to `dev` and brings `dev` up.
    pub fn addr(&self, dev: &str, cidr: &str) -> Result<(), NetnsError> {
        let (a, len) = crate::parse_cidr(cidr)?;
        let rt = self.rtnl()?;
        rt.add_addr(dev, a, len)?;
        rt.set_up(dev, true)
    }

    /// Disarms the drop: the namespace outlives this handle (the caller records
    /// its name to delete it later).
    pub fn keep(self) -> String {
        let name = self.name.clone();
        std::mem::forget(self);
        name
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = delete(&self.name);
    }
}
