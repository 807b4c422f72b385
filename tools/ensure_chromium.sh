# Sourced by test.sh: the workbench test drives Debian's Chromium through
# chromedriver. Installs both when missing and we are root with apt-get; otherwise says how.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo ">> installing chromium + chromium-driver for the workbench browser test" >&2
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
    else
        echo "!! /usr/bin/chromium and /usr/bin/chromedriver are needed for tests/test_workbench.py;" >&2
        echo "!! install them (Debian: apt-get install chromium chromium-driver) or set INFERLAB_SKIP_BROWSER=1" >&2
    fi
fi
