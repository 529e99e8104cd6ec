//! Links Vectorscan (`libhs`, Debian's `libvectorscan-dev`) when the build
//! machine has it, and sets `cfg(sluice_vectorscan)`: the IPS's literal
//! searches then run on it ([`crate::vectorscan`]), and on the hashed search
//! otherwise. `SLUICE_VECTORSCAN=off` builds without it even where it is
//! installed; `SLUICE_VECTORSCAN=on` makes its absence an error instead of a
//! warning (a packaged build must not silently lose it).

fn main() {
    println!("cargo:rustc-check-cfg=cfg(sluice_vectorscan)");
    println!("cargo:rerun-if-env-changed=SLUICE_VECTORSCAN");
    let want = std::env::var("SLUICE_VECTORSCAN").unwrap_or_default();
    if want == "off" {
        return;
    }
    match pkg_config::Config::new()
        .atleast_version("5.4")
        .probe("libhs")
    {
        Ok(_) => println!("cargo:rustc-cfg=sluice_vectorscan"),
        Err(e) if want == "on" => {
            panic!("SLUICE_VECTORSCAN=on but libhs (libvectorscan-dev) was not found: {e}")
        }
        Err(_) => println!(
            "cargo:warning=libhs (Debian: libvectorscan-dev) not found: the IPS searches with its own hashed engine only (about 1.16x the time per packet on ET Open's HTTP mix, docs/BENCHMARKS.md)"
        ),
    }
}
