#!/bin/sh
# Routing profiles accumulate (issue 14, core/model/routing_profile.h): on a tiny model,
#   - two `guild run --record-routing` recordings into one file add up exactly (each count and the tokens are the
#     sums of the same runs recorded into files of their own);
#   - `guild optimize` adds its calibration counts to a recorded profile: the recorded counts stay (the profile
#     afterwards = the recording + what --fresh-profile writes for the calibration alone);
#   - a profile of another model's shape is refused by --record-routing and by optimize, before any work, with a
#     message naming the profile and the model, and the file is left byte for byte as it was;
#   - a truncated profile is refused the same way and left untouched.
set -u
. "$(dirname "$0")/test_lib.sh"
need_built "$MK" "$G"
make_tmp

mk() { # name, experts, seed
    "$MK" --arch qwen3moe --layers 2 --embd 128 --heads 4 --kv-heads 2 --head-dim 32 --experts "$2" \
        --experts-used 2 --expert-ff 128 --ctx 256 --type Q4_K --seed "$3" -q -o "$T/$1.gguf" >"$T/mk.log" 2>&1 ||
        { cat "$T/mk.log"; fail "guild-mkmodel $1"; }
}
mk m 8 11
mk other 16 12
cp "$T/m.gguf" "$T/cal.gguf"
rec() { # name, profile, prompt
    "$G" run --backend cpu -m "$T/m.gguf" -p "$3" -n 4 --temp 0 --single-process --no-tuning --record-routing "$2" \
        >"$T/$1.txt" 2>"$T/$1.err" || { cat "$T/$1.err"; fail "guild run --record-routing ($1)"; }
}
# the counts of a profile, one per line: tokens, then every layer's
counts() { sed -n 's/^tokens = //p; s/^layer [0-9]* = //p' "$1" | tr ' ' '\n'; }
sum_is() { # want = a + b, profiles
    counts "$2" >"$T/a.c"
    counts "$3" >"$T/b.c"
    counts "$1" >"$T/w.c"
    [ -s "$T/w.c" ] || fail "$1 holds no counts"
    paste "$T/a.c" "$T/b.c" | awk '{ print $1 + $2 }' | cmp -s - "$T/w.c" ||
        { paste "$T/a.c" "$T/b.c" "$T/w.c"; fail "$1 is not $2 + $3"; }
}

P1="The quick brown fox jumps over the lazy dog."
P2="SELECT name, COUNT(*) FROM orders GROUP BY name; 1, 1, 2, 3, 5, 8, 13, 21"
rec one "$T/one.routing" "$P1"
rec two "$T/two.routing" "$P2"
rec both1 "$T/both.routing" "$P1"
grep -q "routing counts written to" "$T/both1.err" || { cat "$T/both1.err"; fail "no 'written to' message"; }
rec both2 "$T/both.routing" "$P2"
grep -q "routing counts added to .*both.routing: [1-9][0-9]* tokens before" "$T/both2.err" ||
    { cat "$T/both2.err"; fail "no 'added to' message"; }
sum_is "$T/both.routing" "$T/one.routing" "$T/two.routing"
echo "ok: two recordings add up exactly ($(sed -n 's/^tokens = //p' "$T/both.routing") tokens)"

# optimize after a recording keeps the recorded counts
opt() { # model, extra args...
    m=$1
    shift
    "$G" optimize -m "$T/$m.gguf" -o "$T/$m.tuning" --runs 3 --steps 2 --profile-tokens 24 "$@" >"$T/opt.txt" 2>&1
}
cp "$T/both.routing" "$T/m.gguf.routing"
opt m || { cat "$T/opt.txt"; fail "guild optimize on a recorded profile"; }
grep -q "added the routing of 24 calibration tokens to .*m.gguf.routing" "$T/opt.txt" ||
    { cat "$T/opt.txt"; fail "optimize did not say it added to the profile"; }
printf 'version = 1\n' >"$T/cal.gguf.routing" # --fresh-profile replaces even a malformed one
opt cal --fresh-profile || { cat "$T/opt.txt"; fail "guild optimize --fresh-profile"; }
sum_is "$T/m.gguf.routing" "$T/both.routing" "$T/cal.gguf.routing"
echo "ok: optimize added its calibration to the recorded profile"

refused() { # what, profile, message words...: the last command failed naming them, the profile as kept
    what=$1
    prof=$2
    shift 2
    for w in "$@"; do
        grep -q "$w" "$T/out.err" || { cat "$T/out.err"; fail "$what: the message does not name $w"; }
    done
    cmp -s "$prof" "$T/keep.routing" || fail "$what: $prof was changed"
}
# another model's profile
cp "$T/both.routing" "$T/keep.routing"
if "$G" run -m "$T/other.gguf" -p "$P1" -n 2 --single-process --no-tuning --record-routing "$T/both.routing" \
    >/dev/null 2>"$T/out.err"; then
    fail "--record-routing added to another model's profile"
fi
refused "run, another model" "$T/both.routing" "both.routing" "other.gguf" "another model"
grep -q "prefill:" "$T/out.err" && fail "the run went ahead before refusing the profile"
cp "$T/both.routing" "$T/other.gguf.routing"
opt other >/dev/null 2>&1 && fail "optimize added to another model's profile"
cp "$T/opt.txt" "$T/out.err"
refused "optimize, another model" "$T/other.gguf.routing" "other.gguf.routing" "other.gguf has" "nothing done"
[ -e "$T/other.tuning" ] && fail "optimize measured before refusing the profile"
echo "ok: another model's profile refused, naming both, left as it was"

# a truncated profile (cut inside its last count)
head -c -3 "$T/both.routing" >"$T/keep.routing"
cp "$T/keep.routing" "$T/cut.routing"
if "$G" run -m "$T/m.gguf" -p "$P1" -n 2 --single-process --no-tuning --record-routing "$T/cut.routing" \
    >/dev/null 2>"$T/out.err"; then
    fail "--record-routing added to a truncated profile"
fi
refused "run, truncated" "$T/cut.routing" "cut.routing" "truncated"
cp "$T/keep.routing" "$T/m.gguf.routing"
opt m >/dev/null 2>&1 && fail "optimize added to a truncated profile"
cp "$T/opt.txt" "$T/out.err"
refused "optimize, truncated" "$T/m.gguf.routing" "m.gguf.routing" "truncated"
echo "ok: a truncated profile refused and left untouched"
ls "$T" | grep -q '\.tmp\.' && fail "a temporary file was left"
echo "PASS: routing profiles accumulate"
