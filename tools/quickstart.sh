#!/usr/bin/env bash
# Guild's two entry points for a fresh Debian 12 machine (README.md):
#   bash tools/quickstart.sh run    install what is missing, build, run the demo model
#   bash tools/quickstart.sh test   install what is missing, build, run the whole test suite
#                                   (make check, then an ASan+UBSan build's make check)
# Idempotent: a second run installs nothing and rebuilds only what changed. Quiet on success.
set -euo pipefail

mode=${1:-}
case "$mode" in
run | test) ;;
*)
    echo "usage: bash tools/quickstart.sh run|test" >&2
    exit 2
    ;;
esac

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
jobs=$(nproc 2>/dev/null || echo 2)

packages=(autoconf automake libtool pkg-config make gcc python3 python3-numpy
    libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libnuma-dev numactl check libsubunit-dev
    libpcre2-dev libjansson-dev libmicrohttpd-dev clang iproute2)
# the test suite's client of guild serve --parallel (tests/serve_parallel.sh: the openai npm package); by command,
# not by package: a node from elsewhere (nodesource's nodejs bundles npm and conflicts with Debian's npm package)
# serves as well
if [ "$mode" = test ]; then
    command -v node >/dev/null 2>&1 || packages+=(nodejs)
    command -v npm >/dev/null 2>&1 || packages+=(npm)
fi

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# Runs a command quietly; on failure shows its output.
quiet() {
    local log
    log=$(mktemp)
    if ! "$@" >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        return 1
    fi
    rm -f "$log"
}

install_missing() {
    local missing=()
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    # libFuzzer's runtime comes in a package named after clang's major version.
    if command -v clang >/dev/null 2>&1; then
        local v
        v=$(clang -dumpversion | cut -d. -f1)
        dpkg-query -W -f='${Status}' "libclang-rt-$v-dev" 2>/dev/null | grep -q "ok installed" ||
            missing+=("libclang-rt-$v-dev")
    fi
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "quickstart: installing ${missing[*]}" >&2
    quiet as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    quiet as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
    # clang was only just installed: its libFuzzer runtime is named after its version.
    if ! clang -fsanitize=fuzzer -x c - -o /dev/null >/dev/null 2>&1 <<<'int LLVMFuzzerTestOneInput(const unsigned char*d,unsigned long n){(void)d;(void)n;return 0;}'; then
        quiet as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            "libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev" || true
    fi
}

# configure_build DIR [configure args...]: configure DIR once (again only if configure.ac changed).
configure_build() {
    local dir=$1
    shift
    mkdir -p "$dir"
    if [ ! -f "$dir/Makefile" ] || [ configure -nt "$dir/config.status" ]; then
        (cd "$dir" && quiet ../configure PYTHON=/usr/bin/python3 "$@")
    fi
}

install_missing
if [ ! -x configure ] || [ configure.ac -nt configure ]; then
    quiet autoreconf -fi
fi

configure_build build
quiet make -C build -j"$jobs"

# copy_cuda_objects FROM TO: the CUDA kernel objects of build FROM into build TO, when both compile them alike.
# nvcc builds them without the sanitizer flags (GUILD_NVCCFLAGS), so the sanitizer build's would be the normal
# build's again (only the name of nvcc's temporary file inside differs), at minutes of compile time. Copied with
# their times (cp -p, and only over older ones), make finds them up to date unless a source changed since.
copy_cuda_objects() {
    local from=$1 to=$2 o
    [ "$(grep -E '^NVCC(FLAGS)? =' "$from/Makefile")" = "$(grep -E '^NVCC(FLAGS)? =' "$to/Makefile")" ] || return 0
    (cd "$from" && find . -name '*.cuda.o') | while read -r o; do
        mkdir -p "$to/$(dirname "$o")"
        cp -p -u "$from/$o" "$to/$o"
    done
}

show_failures() {
    local dir=$1
    echo "quickstart: tests failed in $dir; logs:" >&2
    for f in "$dir"/tests/*.log "$dir"/test-suite.log; do
        [ -f "$f" ] || continue
        grep -qE '^(FAIL|ERROR)|:[0-9]+:[EF]:' "$f" 2>/dev/null && { echo "--- $f" >&2; tail -n 60 "$f" >&2; }
    done
}

case "$mode" in
run)
    exec build/guild run
    ;;
test)
    if ! quiet make -C build -j"$jobs" check; then
        show_failures build
        exit 1
    fi
    grep -h '^# ' build/test-suite.log | sed 's/^/quickstart: build: /'
    configure_build build-asan --enable-sanitizers
    copy_cuda_objects build build-asan
    if ! quiet make -C build-asan -j"$jobs" check; then
        show_failures build-asan
        exit 1
    fi
    grep -h '^# ' build-asan/test-suite.log | sed 's/^/quickstart: build-asan: /'
    ;;
esac
