#!/usr/bin/env bash
# Install the Debian packages the test suite needs (`make system-deps`, run by `make test`):
#   chromium  the browser tests: Playwright drives /usr/bin/chromium with executable_path
#             (never `playwright install`)
#   nodejs    `node --test` over the web client's tables and worklets, and the Python tests
#             that replay traces through the browser runtime (Node >= 18; bookworm has 18)
#   qemu-user `qemu-x86_64 -cpu max`: an x86-64 CPU with AVX2 and no AVX-512, on which the
#             models' outputs are checked to be the ones this CPU gives
# As root, whatever is missing is installed. Without root, a missing tool is an error: the
# tests that need it fail (they never skip), so stop here with the command that fixes it.
set -euo pipefail

MIN_NODE_MAJOR=18
CHROMIUM=/usr/bin/chromium

# `node` the way tests/system_tools.py looks for it: on PATH, else the Debian paths; it
# counts only at version MIN_NODE_MAJOR or later
node_ok() {
    local candidate major
    for candidate in "$(command -v node || true)" "$(command -v nodejs || true)" \
        /usr/bin/node /usr/bin/nodejs; do
        [ -n "$candidate" ] && [ -x "$candidate" ] || continue
        major=$("$candidate" --version 2>/dev/null | sed -n 's/^v\([0-9]*\)\..*/\1/p')
        if [ -n "$major" ] && [ "$major" -ge "$MIN_NODE_MAJOR" ]; then
            return 0
        fi
    done
    return 1
}

chromium_ok() {
    [ -x "$CHROMIUM" ]
}

# qemu-user's x86_64 emulator runs the end-of-turn model as on a CPU without AVX-512 (the
# CPU-neutrality test and tools/model_margins.py); needed on x86_64 hosts only
qemu_ok() {
    [ "$(uname -m)" != x86_64 ] || command -v qemu-x86_64 >/dev/null
}

missing_packages() {
    chromium_ok || echo chromium
    node_ok || echo nodejs
    qemu_ok || echo qemu-user
}

mapfile -t missing < <(missing_packages)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    {
        echo "system-deps: ERROR: missing ${missing[*]} (needed by the test suite: its browser"
        echo "  and Node tests fail without them). Install as root:"
        echo "    sudo make system-deps    (or: sudo bash tools/install_system_deps.sh)"
        echo "  which runs: apt-get install --no-install-recommends ${missing[*]}"
    } >&2
    exit 1
fi
echo "system-deps: installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
mapfile -t still < <(missing_packages)
if [ ${#still[@]} -ne 0 ]; then
    echo "system-deps: ERROR: still missing after apt-get install: ${still[*]}" \
        "(chromium at $CHROMIUM; node >= $MIN_NODE_MAJOR on PATH or in /usr/bin; qemu-x86_64)" >&2
    exit 1
fi
