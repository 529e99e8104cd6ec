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
        Err(_) => {
            println!(
                "cargo:warning=libhs (Debian: libvectorscan-dev) not found: the IPS searches with its own hashed engine only (about 1.6x the time per packet on ET Open's HTTP mix, docs/BENCHMARKS.md)"
            );
            watch_pkg_config_dirs();
        }
    }
}

/// Has cargo run this script again when a package adds a `.pc` file (a
/// `libvectorscan-dev` installed after a first build), not only when the
/// environment changes: cargo watches the directories pkg-config searches.
fn watch_pkg_config_dirs() {
    let mut dirs: Vec<String> = std::env::var("PKG_CONFIG_PATH")
        .unwrap_or_default()
        .split(':')
        .map(str::to_owned)
        .collect();
    if let Ok(out) = std::process::Command::new("pkg-config")
        .args(["--variable", "pc_path", "pkg-config"])
        .output()
    {
        let path = String::from_utf8_lossy(&out.stdout);
        dirs.extend(path.trim().split(':').map(str::to_owned));
    }
    for d in dirs {
        if !d.is_empty() && std::path::Path::new(&d).is_dir() {
            println!("cargo:rerun-if-changed={d}");
        }
    }
}
