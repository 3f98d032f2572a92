# Sourced by scripts/check-template, scripts/sam-build and scripts/sam-local: puts the pinned
# template tools (scripts/template-tools.txt: SAM CLI, cfn-lint, cargo-lambda with zig) first
# on PATH, installing them from PyPI into a private virtualenv the first time.
#
# The virtualenv is named after the hash of the pin file, so changing a pin installs a fresh
# one and a stale one is never used. Tools of the same names elsewhere on PATH are not used:
# their versions are whatever that machine happens to have.

# A private virtualenv with exactly the pins of file $1, named $2-<hash of the file>; prints its
# bin directory on stdout (progress goes to stderr).
claimonce_venv() {
    local pins=$1 name=$2 hash dir
    # sha256sum is GNU's; macOS has shasum.
    hash="$( (sha256sum "$pins" 2>/dev/null || shasum -a 256 "$pins") | cut -c1-12)"
    dir="${CLAIMONCE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/claimonce/$name-$hash}"
    export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
    mkdir -p "$(dirname "$dir")"
    # Several callers at once (the tests start their emulators in parallel) install it once:
    # the first holds the lock while it installs, the others wait and then find it installed.
    # The lock goes with the process; without flock (macOS), callers are not serialised.
    if [ ! -e "$dir/.installed" ] && command -v flock >/dev/null; then
        exec 9>"$dir.lock"
        flock 9
    fi
    if [ ! -e "$dir/.installed" ]; then
        echo "--- installing $(basename "$pins")'s pins into $dir" >&2
        rm -rf "$dir"
        mkdir -p "$(dirname "$dir")"
        if ! python3 -m venv "$dir" 2>/dev/null; then
            # Debian ships venv (ensurepip) as a separate package.
            rm -rf "$dir"
            if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
                apt-get update -qq >&2
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
                python3 -m venv "$dir"
            else
                echo "python3 -m venv failed; install python3-venv (Debian/Ubuntu)" >&2
                return 1
            fi
        fi
        "$dir/bin/pip" install --quiet -r "$pins" >&2
        touch "$dir/.installed"
    fi
    echo "$dir/bin"
}

claimonce_tools() {
    local root bin
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    export SAM_CLI_TELEMETRY=0
    bin="$(claimonce_venv "$root/scripts/template-tools.txt" tools)" || return 1
    # SAM runs cargo and cargo-lambda from PATH; cargo-lambda finds zig through the
    # virtualenv's python (the ziglang package).
    export PATH="$bin:$PATH"
}
