#!/usr/bin/env bash
# Install the Debian packages the test suite needs, when running as root and missing.
# Without root, print what is missing and let the tests that need it skip themselves.
set -euo pipefail
# chromium: the browser tests (Playwright drives it with executable_path; never
# `playwright install`)
PACKAGES=(chromium)
missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "system-deps: not root; missing ${missing[*]} (tests needing them will skip)" >&2
    exit 0
fi
echo "system-deps: installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
