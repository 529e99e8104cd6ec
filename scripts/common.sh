# Shared by the project's scripts: make sure the toolchain and packages are here.
# Idempotent: a second run installs nothing.

need_cargo() {
    if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        echo "cargo not found; installing Debian's cargo (Sluice needs Rust >= 1.87)" >&2
        apt_install cargo rustc
    fi
    local v
    v=$(rustc --version | awk '{print $2}')
    if [ "$(printf '%s\n1.87.0\n' "$v" | sort -V | head -n1)" != "1.87.0" ]; then
        echo "error: rustc $v is too old; Sluice needs Rust >= 1.87 (rustup toolchain)" >&2
        exit 1
    fi
}

apt_updated=0
# apt_install PKG...: installs the Debian packages that are missing.
apt_install() {
    local missing=()
    for p in "$@"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    if [ $apt_updated -eq 0 ]; then
        $sudo apt-get update -qq
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
}

# Packages the build and the tests need: a C/C++ toolchain and cmake (the LP solver
# HiGHS is built from source) and redis-server (tests start their own servers on
# loopback ports; the package's system service is not used).
ensure_build_deps() {
    apt_install build-essential cmake pkg-config redis-server
    need_cargo
}
