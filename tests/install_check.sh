#!/bin/sh
# make install into a scratch DESTDIR (issue 19): the programs, guild.pc, the manual pages, the systemd units and
# their configuration where the prefix puts them; the installed guild runs the installed workers (it looks for
# them beside itself, not in the build tree); guild.pc and the units name the installed paths; make uninstall
# takes it all away again.
set -u
B=${GUILD_BUILDDIR:-.}
if [ ! -f "$B/Makefile" ] || [ ! -x "$B/guild" ]; then
    echo "SKIP: no build tree at $B"
    exit 77
fi
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

fail() {
    echo "FAIL: $*"
    exit 1
}

prefix=$(sed -n 's/^prefix = //p' "$B/Makefile")
[ -n "$prefix" ] || fail "no prefix in $B/Makefile"
D=$T/root
make -s -C "$B" install DESTDIR="$D" >"$T/install.log" 2>&1 || { tail -20 "$T/install.log"; fail "make install"; }
R=$D$prefix
for f in bin/guild bin/guild-gpu-worker bin/guild-cpu-worker bin/guild-stager bin/guild-mkmodel \
    lib/pkgconfig/guild.pc share/man/man1/guild.1 share/man/man1/guild-gpu-worker.1 \
    share/man/man1/guild-cpu-worker.1 share/man/man1/guild-stager.1 share/man/man1/guild-mkmodel.1 \
    lib/systemd/system/guild-serve.service lib/systemd/system/guild-cpu-worker@.service etc/guild/guild.conf; do
    [ -f "$R/$f" ] || fail "make install did not install $prefix/$f"
done

# the paths they name are the installed ones
grep -qx "bindir=$prefix/bin" "$R/lib/pkgconfig/guild.pc" || fail "guild.pc: bindir is not $prefix/bin"
grep -q "^Version: [0-9]" "$R/lib/pkgconfig/guild.pc" || fail "guild.pc: no version"
grep -qx "ExecStart=$prefix/bin/guild serve \$GUILD_SERVE_FLAGS" "$R/lib/systemd/system/guild-serve.service" ||
    fail "guild-serve.service: ExecStart"
grep -qx "EnvironmentFile=$prefix/etc/guild/guild.conf" "$R/lib/systemd/system/guild-cpu-worker@.service" ||
    fail "guild-cpu-worker@.service: EnvironmentFile"
grep -qx "ExecStart=$prefix/bin/guild-cpu-worker --node %i \$GUILD_CPU_WORKER_FLAGS" \
    "$R/lib/systemd/system/guild-cpu-worker@.service" || fail "guild-cpu-worker@.service: ExecStart"
! grep -q "@[a-z_]*@" "$R/lib/systemd/system/"*.service "$R/lib/pkgconfig/guild.pc" || fail "an unsubstituted @name@"
# the manual pages hold each program's --help
grep -q '^\.TH GUILD 1' "$R/share/man/man1/guild.1" || fail "guild.1: no .TH"
grep -q '^\.SH "guild serve"' "$R/share/man/man1/guild.1" || fail "guild.1: no guild serve section"
grep -q -- '--check-finite' "$R/share/man/man1/guild.1" || fail "guild.1: guild run's flags are missing"
grep -q -- '--node' "$R/share/man/man1/guild-cpu-worker.1" || fail "guild-cpu-worker.1: its flags are missing"

# the installed guild runs the installed workers
"$R/bin/guild-mkmodel" --arch qwen3moe --layers 2 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 \
    --experts-used 2 --expert-ff 256 --ctx 128 --type Q8_0 --seed 2 -q -o "$T/m.gguf" || fail "installed guild-mkmodel"
timeout 60 "$R/bin/guild" run -m "$T/m.gguf" -p "hello" -n 4 --temp 0 --threads 1 --cpu-workers 1 \
    --ids-out "$T/multi.ids" >/dev/null 2>"$T/run.err" || { cat "$T/run.err"; fail "installed guild run"; }
timeout 60 "$R/bin/guild" run -m "$T/m.gguf" -p "hello" -n 4 --temp 0 --threads 1 --single-process \
    --ids-out "$T/single.ids" >/dev/null 2>&1 || fail "installed guild run --single-process"
cmp -s "$T/multi.ids" "$T/single.ids" || fail "installed pipeline and single process differ"
mv "$R/bin/guild-cpu-worker" "$T/away"
timeout 60 "$R/bin/guild" run -m "$T/m.gguf" -p "hello" -n 4 --cpu-workers 1 >/dev/null 2>"$T/run.err" &&
    fail "the installed guild ran without its installed CPU worker"
grep -qF "$R/bin/guild-cpu-worker" "$T/run.err" || { cat "$T/run.err"; fail "the installed guild looked elsewhere"; }
mv "$T/away" "$R/bin/guild-cpu-worker"

# an operator's configuration survives a second install and the uninstall
echo "GUILD_SERVE_FLAGS=-m /mine.gguf" >"$R/etc/guild/guild.conf"
make -s -C "$B" install DESTDIR="$D" >"$T/install.log" 2>&1 || fail "make install again"
grep -q "/mine.gguf" "$R/etc/guild/guild.conf" || fail "make install overwrote the operator's guild.conf"
make -s -C "$B" uninstall DESTDIR="$D" >"$T/uninstall.log" 2>&1 || { tail "$T/uninstall.log"; fail "make uninstall"; }
left=$(find "$D" -type f | grep -v "/etc/guild/guild.conf$")
[ -z "$left" ] || fail "make uninstall left: $left"
echo "PASS: make install DESTDIR: programs, guild.pc, manual pages, units and guild.conf in place; the installed guild runs its installed workers; uninstall is clean"
