#!/bin/sh
# Make sure Criterion (the test framework) is installed; install it with
# apt-get when possible, otherwise say exactly what to run.
if [ -f /usr/include/criterion/criterion.h ] || [ -f /usr/local/include/criterion/criterion.h ]; then
    exit 0
fi
echo "Criterion is not installed; installing libcriterion-dev ..." >&2
SUDO=
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO=sudo
if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; }; then
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libcriterion-dev >/dev/null
    if [ -f /usr/include/criterion/criterion.h ]; then
        exit 0
    fi
fi
cat >&2 <<'MSG'
Could not install Criterion automatically. Install it, then run make test again:
    sudo apt-get install libcriterion-dev        # Debian / Ubuntu
MSG
exit 1
