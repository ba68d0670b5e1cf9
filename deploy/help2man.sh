#!/bin/sh
# A manual page from a program's --help: help2man.sh NAME VERSION "SUMMARY" OUT -- COMMAND... [-- COMMAND...]
# Each COMMAND's --help output becomes a section (the first one DESCRIPTION, the others named by their command
# line), verbatim. The pages say what --help says: docs/cli.md has the long form.
set -eu
name=$1 version=$2 summary=$3 out=$4
shift 4
tmp=$out.tmp
{
    printf '.TH %s 1 "" "Guild %s" "Guild"\n' "$(echo "$name" | tr a-z A-Z)" "$version"
    printf '.SH NAME\n%s \\- %s\n' "$name" "$summary"
    first=1
    while [ $# -gt 0 ]; do
        [ "$1" = "--" ] && shift
        cmd=""
        while [ $# -gt 0 ] && [ "$1" != "--" ]; do
            cmd="$cmd $1"
            shift
        done
        if [ $first -eq 1 ]; then
            printf '.SH DESCRIPTION\n'
            first=0
        else
            printf '.SH "%s"\n' "$(echo "${cmd# }" | sed 's|^[^ ]*/||; s| --help$||')"
        fi
        printf '.nf\n'
        # shellcheck disable=SC2086
        $cmd | sed 's/\\/\\e/g; s/^\([.'"'"']\)/\\\&\1/'
        printf '.fi\n'
    done
    printf '.SH "SEE ALSO"\nguild(1), guild-gpu-worker(1), guild-cpu-worker(1), guild-stager(1), guild-mkmodel(1); docs/cli.md, docs/server.md and docs/deployment.md of the source.\n'
} >"$tmp"
mv "$tmp" "$out"
