//! Vectorscan (the portable fork of Intel's Hyperscan; Debian's
//! `libvectorscan-dev`) as a block-mode search for byte literals, behind the
//! `vectorscan` feature, so that [`crate::hashmpm`] can be measured against
//! it on the same patterns and bytes (the issue's "measure before
//! choosing"; docs/FUNCTIONS.md, "Why not Vectorscan"). The IPS does not
//! use it.
//!
//! Only the five calls a block-mode scan needs are declared, by hand: a
//! binding crate would pull `bindgen` (and libclang) into every build for
//! a measurement.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};

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

/// A compiled set of literals and the scratch space to scan with it.
pub(crate) struct Literals {
    db: *mut HsDatabase,
    scratch: *mut HsScratch,
    lens: Vec<usize>,
}

impl Literals {
    /// Compiles `pats` (bytes, case-sensitive), numbered in order. Each is
    /// written as a pattern of `\xHH` escapes, so any byte (NUL included,
    /// which the literal API refuses first) matches itself.
    pub(crate) fn new<'a>(
        pats: impl IntoIterator<Item = (&'a [u8], bool)>,
    ) -> Result<Literals, String> {
        let (mut exprs, mut flags, mut lens) = (Vec::new(), Vec::new(), Vec::new());
        for (bytes, cs) in pats {
            if bytes.is_empty() {
                return Err("an empty pattern".into());
            }
            let mut e = String::with_capacity(4 * bytes.len() + 1);
            for b in bytes {
                e.push_str(&format!("\\x{b:02x}"));
            }
            e.push('\0');
            exprs.push(e);
            flags.push(if cs { 0 } else { HS_FLAG_CASELESS });
            lens.push(bytes.len());
        }
        let ptrs: Vec<*const c_char> = exprs.iter().map(|e| e.as_ptr().cast()).collect();
        let ids: Vec<c_uint> = (0..ptrs.len() as c_uint).collect();
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
                    "pattern {}: {}",
                    e.expression,
                    CStr::from_ptr(e.message).to_string_lossy()
                );
                hs_free_compile_error(err);
                m
            };
            return Err(msg);
        }
        let mut scratch = std::ptr::null_mut();
        // SAFETY: `db` is the database just compiled.
        if unsafe { hs_alloc_scratch(db, &mut scratch) } != HS_SUCCESS {
            // SAFETY: `db` is ours and not used again.
            unsafe { hs_free_database(db) };
            return Err("hs_alloc_scratch failed".into());
        }
        Ok(Literals { db, scratch, lens })
    }

    /// Calls `found(pattern, start)` for every occurrence in `buf` (in the
    /// order Vectorscan reports them, by end).
    pub(crate) fn scan<F: FnMut(u32, usize)>(&mut self, buf: &[u8], mut found: F) {
        struct Ctx<'a, F> {
            lens: &'a [usize],
            found: &'a mut F,
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
            (c.found)(id, to as usize - c.lens[id as usize]);
            0
        }
        let mut ctx = Ctx {
            lens: &self.lens,
            found: &mut found,
        };
        // SAFETY: `db` and `scratch` are valid and ours; the data pointer
        // and length describe `buf`; `ctx` outlives the call.
        unsafe {
            hs_scan(
                self.db,
                buf.as_ptr().cast(),
                buf.len() as c_uint,
                0,
                self.scratch,
                Some(on::<F>),
                (&mut ctx as *mut Ctx<'_, F>).cast(),
            );
        }
    }
}

impl Drop for Literals {
    fn drop(&mut self) {
        // SAFETY: both were allocated by the library for this value and are
        // freed once.
        unsafe {
            hs_free_scratch(self.scratch);
            hs_free_database(self.db);
        }
    }
}
