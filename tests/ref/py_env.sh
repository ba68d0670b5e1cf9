# tests/ref/py_env.sh — sourced by the reference's test scripts: finds the Python that has NumPy.
# Skips the test (exit 77) only when no such Python exists; anything else that is wrong is a failure.
: "${GUILD_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${GUILD_BUILDDIR:=$GUILD_SRCDIR}"
REFDIR="$GUILD_SRCDIR/tests/ref"
export PYTHONDONTWRITEBYTECODE=1
py=""
for cand in "${PYTHON:-}" /usr/bin/python3 python3; do
    [ -n "$cand" ] || continue
    if "$cand" -c 'import numpy' >/dev/null 2>&1; then
        py="$cand"
        break
    fi
done
if [ -z "$py" ]; then
    echo "SKIP: no Python with NumPy (tried PYTHON='${PYTHON:-}', /usr/bin/python3, python3); install python3-numpy"
    exit 77
fi
PYTHON="$py"
