#!/bin/sh
# The documentation names files that exist (issue 13): every repository path mentioned in README.md, docs/*.md
# and the READMEs under bench/ (things like `ipc/exchange.h`, `gpu-worker/dense/cuda/cuda_moe_gpu.c`,
# `bench/device/final.sh`, `bench/results/cuda4-*`), and every relative Markdown link, is a file or folder of
# the source tree, so that the docs cannot silently drift from the code when files move. A path is checked as
# written; one without an extension (`ipc/exchange`, `tests/check_stager`: a module or a program) may name the
# files that start with it, and one with a `*` is a pattern that must match something. Paths under build/ are
# built files and are not checked; nor is CHANGELOG.md, whose history names files where they were at the time.
# Runs in a git checkout only: a release tarball does not carry bench/results/ (SKIP there).
set -u
top="${GUILD_SRCDIR:-$(dirname "$0")/..}"
cd "$top" || exit 99
if [ ! -e .git ]; then
    echo "SKIP: not a git checkout (the documented bench/results/ are not distributed)"
    exit 77
fi

docs="README.md"
for f in docs/*.md bench/README.md bench/device/README.md bench/harness/README.md; do
    [ -f "$f" ] && docs="$docs $f"
done

# The top-level folders a repository path starts with.
dirs='core|ipc|coordinator|gpu-worker|cpu-expert-worker|stager|tools|tests|bench|proto|docs|deploy|m4|\.ci'

fail=0
checked=0
for doc in $docs; do
    # A path: one of the folders above, not preceded by a name character or a slash (so build/tools/... and
    # URLs are not taken), optionally after ../ (links from docs/), then path characters; trailing punctuation
    # is the sentence's.
    paths=$(grep -oE "(^|[^A-Za-z0-9_./-])(\.\./)?($dirs)/[A-Za-z0-9_./*+-]*" "$doc" |
        sed -E 's/^[^A-Za-z0-9_.]//; s|^\.\./||; s/[.,:;]+$//' | sort -u)
    for p in $paths; do
        checked=$((checked + 1))
        case "$p" in
        *'*'*)
            # shellcheck disable=SC2086
            set -- $p
            [ -e "$1" ] && continue
            ;;
        *)
            [ -e "$p" ] && continue
            case "${p##*/}" in
            *.*) ;;
            *)
                set -- "$p".* "$p"[-_]*
                for m in "$@"; do
                    [ -e "$m" ] && continue 2
                done
                ;;
            esac
            ;;
        esac
        echo "FAIL: $doc names $p, which is not in the tree"
        fail=1
    done
    # Markdown links, relative to the document's folder (docs/ links to its neighbours by file name alone).
    here=$(dirname "$doc")
    links=$(grep -oE '\]\([^)#[:space:]]+' "$doc" | sed 's/^](//' | grep -vE '^[a-z]+:' | sort -u)
    for l in $links; do
        checked=$((checked + 1))
        [ -e "$here/$l" ] && continue
        echo "FAIL: $doc links to $l, which is not in the tree"
        fail=1
    done
done
if [ "$checked" -lt 20 ]; then
    echo "FAIL: only $checked paths found in $docs: is the extraction broken?"
    fail=1
fi
[ "$fail" -eq 0 ] && echo "ok: $checked paths named in $docs exist"
exit $fail
