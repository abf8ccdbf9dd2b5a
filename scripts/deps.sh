# Installs the Debian packages claw-gateway needs, if any are missing.
# Sourced by scripts/run and scripts/test.

CLAW_PACKAGES="mosquitto mosquitto-clients libmosquitto-dev libsqlite3-dev openssl curl ca-certificates"
# What only the tests need: the reference PC of examples/ (paho-mqtt), a
# real browser for the dashboard (headless chromium, driven over WebDriver by
# chromedriver), and Debian's tools to build, lint and install-test the package.
CLAW_TEST_PACKAGES="python3 python3-paho-mqtt chromium chromium-driver dpkg-dev binutils lintian debootstrap"

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

# mosquitto lives in /usr/sbin, which is not on every user's PATH.
export PATH="$PATH:/usr/sbin:/usr/local/sbin"
