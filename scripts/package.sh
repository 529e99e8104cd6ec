#!/usr/bin/env bash
# Builds Sluice's Debian packages (docs/DEPLOY.md):
#   sluice        the CLI and the controller (`sluice controller`), its systemd unit,
#                 /etc/sluice/controller.toml and the `sluice` system user;
#   sluice-agent  the host agent `sluiced`, its systemd unit and /etc/sluice/agent.toml.
#
#   scripts/package.sh [--bin-dir DIR] [--out DIR] [--fast]
#
# Without --bin-dir it builds the release binaries first; --bin-dir packages binaries
# already built (the package test uses the test build's). The packages land in --out
# (default target/debian); --fast compresses with gzip -1 instead of xz (the
# package test's debug binaries are large). Only dpkg-deb is needed: no debhelper, no cargo-deb.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh

bin_dir=""
out="target/debian"
compress=(-Zxz)
while [ $# -gt 0 ]; do
    case "$1" in
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --fast) compress=(-Zgzip -z1); shift ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

if [ -z "$bin_dir" ]; then
    ensure_build_deps
    cargo build --release --locked -q -p sluice-cli -p sluice-agent
    bin_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release"
fi
for b in sluice sluiced; do
    if [ ! -x "$bin_dir/$b" ]; then
        echo "error: $bin_dir/$b is missing or not executable (build it, or pass --bin-dir)" >&2
        exit 1
    fi
done
command -v dpkg-deb >/dev/null || { echo "error: dpkg-deb not found (Debian's dpkg)" >&2; exit 1; }

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)-1"
arch="$(dpkg --print-architecture)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# common_files ROOT PACKAGE: documentation every package carries.
common_files() {
    local root="$1" pkg="$2"
    install -d "$root/usr/share/doc/$pkg"
    install -m 0644 README.md docs/DEPLOY.md docs/CONFIG.md "$root/usr/share/doc/$pkg/"
    {
        echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
        echo "Upstream-Name: sluice"
        echo
        echo "Files: *"
        echo "Copyright: the Sluice authors"
        echo "License: Apache-2.0"
        echo " On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0."
    } >"$root/usr/share/doc/$pkg/copyright"
}

# runtime_depends BIN: the packages BIN needs: libc6 and systemd, and the
# package holding libhs when the build linked Vectorscan (the IPS's search,
# crates/functions/ips/build.rs; Debian's libvectorscan5).
runtime_depends() {
    local deps="libc6, systemd" lib pkg
    lib=$(ldd "$1" 2>/dev/null | awk '/libhs\.so/ { print $3; exit }')
    if [ -n "$lib" ]; then
        pkg=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null | cut -d: -f1 | head -n1)
        deps="$deps, ${pkg:-libvectorscan5}"
    fi
    echo "$deps"
}

# control ROOT PACKAGE DESCRIPTION DEPENDS: DEBIAN/control and conffiles.
control() {
    local root="$1" pkg="$2" desc="$3" depends="$4"
    install -d "$root/DEBIAN"
    local size
    size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
    cat >"$root/DEBIAN/control" <<EOF
Package: $pkg
Version: $version
Architecture: $arch
Maintainer: Sluice developers <sluice@localhost>
Section: net
Priority: optional
Installed-Size: $size
Depends: $depends
Homepage: https://github.com/sluice-nfv/sluice
Description: $desc
EOF
    (cd "$root" && find etc -type f 2>/dev/null | sed 's|^|/|' | sort) >"$root/DEBIAN/conffiles"
}

# --- sluice: CLI and controller --------------------------------------------------
r="$work/sluice"
install -D -m 0755 "$bin_dir/sluice" "$r/usr/bin/sluice"
install -D -m 0644 packaging/systemd/sluice-controller.service "$r/lib/systemd/system/sluice-controller.service"
install -D -m 0644 packaging/sysusers/sluice.conf "$r/usr/lib/sysusers.d/sluice.conf"
install -D -m 0644 packaging/etc/controller.toml "$r/etc/sluice/controller.toml"
for shell in bash zsh fish; do
    case $shell in
    bash) dest="usr/share/bash-completion/completions/sluice" ;;
    zsh) dest="usr/share/zsh/vendor-completions/_sluice" ;;
    fish) dest="usr/share/fish/vendor_completions.d/sluice.fish" ;;
    esac
    install -d "$(dirname "$r/$dest")"
    "$bin_dir/sluice" completion "$shell" >"$r/$dest"
done
common_files "$r" sluice
control "$r" sluice "Network functions as a service: CLI and controller
 Sluice runs tenants' middlebox chains (firewall, NAT, load balancer, IPS,
 flow monitor, rate limiter) over a distributed software switch, with every
 function's per-flow state in an external store. This package holds the
 \`sluice\` command line and the controller (sluice-controller.service)." \
    "$(runtime_depends "$bin_dir/sluice")"
cat >"$r/DEBIAN/postinst" <<'EOF'
#!/bin/sh
# The controller runs as the `sluice` system user (sysusers.d); it is not started
# here: edit /etc/sluice/controller.toml, then `systemctl enable --now sluice-controller`.
set -e
if [ "$1" = configure ]; then
    systemd-sysusers ${DPKG_ROOT:+--root="$DPKG_ROOT"} sluice.conf
    if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
        systemctl daemon-reload || true
    fi
fi
EOF
chmod 0755 "$r/DEBIAN/postinst"
dpkg-deb --root-owner-group "${compress[@]}" --build "$r" "$out/sluice_${version}_${arch}.deb" >/dev/null

# --- sluice-agent: the host agent ---------------------------------------------------
r="$work/sluice-agent"
install -D -m 0755 "$bin_dir/sluiced" "$r/usr/bin/sluiced"
install -D -m 0644 packaging/systemd/sluice-agent.service "$r/lib/systemd/system/sluice-agent.service"
install -D -m 0644 packaging/etc/agent.toml "$r/etc/sluice/agent.toml"
common_files "$r" sluice-agent
control "$r" sluice-agent "Network functions as a service: host agent
 sluiced forwards tenant traffic between VM interfaces, NF instances and the
 Geneve fabric between hosts, as the Sluice controller configures it, and runs
 the host's NF instances (sluice-agent.service)." \
    "$(runtime_depends "$bin_dir/sluiced")"
cat >"$r/DEBIAN/postinst" <<'EOF'
#!/bin/sh
# Not started here: set host_id, the controller and the interfaces in
# /etc/sluice/agent.toml, then `systemctl enable --now sluice-agent`.
set -e
if [ "$1" = configure ] && [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
fi
EOF
chmod 0755 "$r/DEBIAN/postinst"
dpkg-deb --root-owner-group "${compress[@]}" --build "$r" "$out/sluice-agent_${version}_${arch}.deb" >/dev/null

ls -1 "$out"/*.deb
