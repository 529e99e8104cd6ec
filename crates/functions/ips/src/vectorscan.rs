//! Vectorscan (the portable fork of Intel's Hyperscan; Debian's
//! `libvectorscan-dev`) as the block-mode search for byte literals behind
//! [`crate::hashmpm::HashMpm`], when the build found it (`build.rs`,
//! `cfg(sluice_vectorscan)`). Measured against the hashed search on the
//! same patterns and bytes (`hashmpm::tests::against_vectorscan`) and in
//! the IPS (docs/BENCHMARKS.md); docs/FUNCTIONS.md, "Vectorscan".
//!
//! Only the calls a block-mode scan needs are declared, by hand: a binding
//! crate would pull `bindgen` (and libclang) into every build for six
//! functions.
//!
//! A database is immutable and shared by every thread; the scratch space a
//! scan needs is one per thread ([`SCRATCH`]), grown to fit each database
//! the thread scans with, once.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};

use rustc_hash::FxHashSet;
#[repr(C)]
struct HsDatabase {
    _opaque: [u8; 0],
}

#[repr(C)]
struct HsScratch {
    _opaque: [u8; 0],
}

#[repr(C)]
struct HsCompileError {
    message: *const c_char,
    expression: c_int,
}

type OnMatch = unsafe extern "C" fn(c_uint, c_ulonglong, c_ulonglong, c_uint, *mut c_void) -> c_int;

const HS_SUCCESS: c_int = 0;
const HS_FLAG_CASELESS: c_uint = 1;
const HS_MODE_BLOCK: c_uint = 1;

#[link(name = "hs")]
extern "C" {
    fn hs_compile_multi(
        expressions: *const *const c_char,
        flags: *const c_uint,
        ids: *const c_uint,
        elements: c_uint,
        mode: c_uint,
        platform: *const c_void,
        db: *mut *mut HsDatabase,
        error: *mut *mut HsCompileError,
    ) -> c_int;
    fn hs_free_compile_error(error: *mut HsCompileError) -> c_int;
    fn hs_alloc_scratch(db: *const HsDatabase, scratch: *mut *mut HsScratch) -> c_int;
    fn hs_free_scratch(scratch: *mut HsScratch) -> c_int;
    fn hs_free_database(db: *mut HsDatabase) -> c_int;
    fn hs_scan(
        db: *const HsDatabase,
        data: *const c_char,
        length: c_uint,
        flags: c_uint,
        scratch: *mut HsScratch,
        on_match: Option<OnMatch>,
        context: *mut c_void,
    ) -> c_int;
}

/// Databases a thread remembers fitting its scratch to.
const MAX_FITS: usize = 1024;

/// Each [`Literals`]'s number, so a thread knows whether its scratch fits it.
static SERIAL: AtomicU64 = AtomicU64::new(0);

/// A thread's scratch space and the databases it was grown for.
struct Scratch {
    ptr: *mut HsScratch,
    fits: FxHashSet<u64>,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: allocated by the library for this thread, freed once.
            unsafe { hs_free_scratch(self.ptr) };
        }
    }
}

thread_local! {
    /// This thread's scratch space ([`Literals::scan`]).
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch {
        ptr: std::ptr::null_mut(),
        fits: FxHashSet::default(),
    });
}

/// A compiled set of literals.
pub(crate) struct Literals {
    db: *mut HsDatabase,
    /// Per pattern id: its length (a match's start is its end less this).
    lens: Vec<u32>,
    serial: u64,
}

// SAFETY: a compiled database is read-only after compilation and Vectorscan
// allows scanning one from many threads at once, each with its own scratch
// (which `Literals` does not hold: [`SCRATCH`] is per thread).
unsafe impl Send for Literals {}
// SAFETY: as for `Send`: `&Literals` only ever reads the database.
unsafe impl Sync for Literals {}

impl Literals {
    /// Compiles `pats` (id, bytes, case-sensitive); ids need not be dense
    /// but should be small (a table of lengths is indexed by them). Each
    /// pattern is written as `\xHH` escapes, so any byte (NUL included,
    /// which the literal API refuses first) matches itself.
    pub(crate) fn new<'a>(
        pats: impl IntoIterator<Item = (u32, &'a [u8], bool)>,
    ) -> Result<Literals, String> {
        let (mut exprs, mut flags, mut ids) = (Vec::new(), Vec::new(), Vec::new());
        let mut lens = Vec::new();
        for (id, bytes, cs) in pats {
            if bytes.is_empty() {
                return Err(format!("pattern {id} is empty"));
            }
            if lens.len() <= id as usize {
                lens.resize(id as usize + 1, 0);
            }
            lens[id as usize] = bytes.len() as u32;
            ids.push(id as c_uint);
            let mut e = String::with_capacity(4 * bytes.len() + 1);
            for b in bytes {
                e.push_str(&format!("\\x{b:02x}"));
            }
            e.push('\0');
            exprs.push(e);
            flags.push(if cs { 0 } else { HS_FLAG_CASELESS });
        }
        if exprs.is_empty() {
            return Err("no patterns".into());
        }
        let ptrs: Vec<*const c_char> = exprs.iter().map(|e| e.as_ptr().cast()).collect();
        let (mut db, mut err) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: the arrays hold `ptrs.len()` elements each and every
        // expression is NUL-terminated; `db` and `err` are out-parameters.
        let rc = unsafe {
            hs_compile_multi(
                ptrs.as_ptr(),
                flags.as_ptr(),
                ids.as_ptr(),
                ptrs.len() as c_uint,
                HS_MODE_BLOCK,
                std::ptr::null(),
                &mut db,
                &mut err,
            )
        };
        if rc != HS_SUCCESS {
            if err.is_null() {
                return Err(format!("hs_compile_multi failed ({rc})"));
            }
            // SAFETY: on failure `err` points at an error the library
            // allocated, with a NUL-terminated message; freed once here.
            let msg = unsafe {
                let e = &*err;
                let m = format!(
                    "expression {}: {}",
                    e.expression,
                    CStr::from_ptr(e.message).to_string_lossy()
                );
                hs_free_compile_error(err);
                m
            };
            return Err(msg);
        }
        Ok(Literals {
            db,
            lens,
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// Calls `found(pattern, start)` for every occurrence in `buf` (in the
    /// order Vectorscan reports them: by end). False, having called nothing,
    /// if this thread cannot scan now (its scratch is in use by a scan this
    /// one was called from, or could not be allocated): the caller searches
    /// another way.
    pub(crate) fn scan<F: FnMut(u32, usize)>(&self, buf: &[u8], mut found: F) -> bool {
        struct Ctx<'a, F> {
            lens: &'a [u32],
            found: &'a mut F,
            calls: usize,
        }
        unsafe extern "C" fn on<G: FnMut(u32, usize)>(
            id: c_uint,
            _from: c_ulonglong,
            to: c_ulonglong,
            _flags: c_uint,
            ctx: *mut c_void,
        ) -> c_int {
            // SAFETY: `ctx` is the `Ctx` `scan` passed, alive for the call.
            let c = unsafe { &mut *ctx.cast::<Ctx<'_, G>>() };
            c.calls += 1;
            // Ids are the ones compiled, each with its length.
            let len = c.lens.get(id as usize).copied().unwrap_or(0) as c_ulonglong;
            (c.found)(id, to.saturating_sub(len) as usize);
            0
        }
        let Ok(len) = c_uint::try_from(buf.len()) else {
            return false;
        };
        SCRATCH.with(|cell| {
            let Ok(mut s) = cell.try_borrow_mut() else {
                return false;
            };
            if !s.fits.contains(&self.serial) {
                // Databases come and go with rule reloads; forgetting which
                // were fitted only costs a re-check each.
                if s.fits.len() >= MAX_FITS {
                    s.fits.clear();
                }
                // SAFETY: `db` is valid; `ptr` is null or this thread's
                // scratch, which the call grows (or allocates) to fit it.
                if unsafe { hs_alloc_scratch(self.db, &mut s.ptr) } != HS_SUCCESS {
                    return false;
                }
                s.fits.insert(self.serial);
            }
            let mut ctx = Ctx {
                lens: &self.lens,
                found: &mut found,
                calls: 0,
            };
            // SAFETY: `db` and the scratch are valid, the scratch fits `db`
            // and no other scan on this thread holds it (the borrow); the
            // data pointer and length describe `buf`; `ctx` outlives the
            // call.
            let rc = unsafe {
                hs_scan(
                    self.db,
                    buf.as_ptr().cast(),
                    len,
                    0,
                    s.ptr,
                    Some(on::<F>),
                    (&mut ctx as *mut Ctx<'_, F>).cast(),
                )
            };
            // A scan of a valid database with its scratch does not fail and
            // the callback never stops it; were it to fail before a match,
            // the caller's own search covers the bytes.
            rc == HS_SUCCESS || ctx.calls > 0
        })
    }
}

impl Drop for Literals {
    fn drop(&mut self) {
        // SAFETY: allocated by the library for this value and freed once;
        // threads' scratch spaces do not refer to it.
        unsafe { hs_free_database(self.db) };
    }
}
