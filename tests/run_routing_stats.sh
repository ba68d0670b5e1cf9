#!/bin/sh
# guild run --stats on a realistic routing load: a 128-expert top-8 model (guild-mkmodel's demo shape) and a
# ~512-token English prompt must touch >= 90% of the experts in every layer, and no expert may take more
# than 3x its fair share of the routed slots (weights centred on zero route like a trained model's do;
# biased random weights would herd every token into a few experts and make every benchmark meaningless).
set -u
B=${GUILD_BUILDDIR:-.}
S=${GUILD_SRCDIR:-..}
MK=$B/tools/guild-mkmodel
G=$B/guild
if [ ! -x "$MK" ]; then
    echo "SKIP: $MK is not built"
    exit 77
fi
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

"$MK" --shape demo --seed 5 -q -o "$T/m.gguf" || { echo "FAIL: guild-mkmodel"; exit 1; }
head -c 905 "$S/README.md" >"$T/prompt.txt"
"$G" run --backend cpu -m "$T/m.gguf" -f "$T/prompt.txt" -n 1 --temp 0 --stats --single-process -v >/dev/null 2>"$T/err" ||
    { cat "$T/err"; echo "FAIL: guild run"; exit 1; }
n_prompt=$(grep -o 'prefill: [0-9]* tokens' "$T/err" | cut -d' ' -f2)
[ "${n_prompt:-0}" -ge 450 ] || { cat "$T/err"; echo "FAIL: the prompt has only ${n_prompt:-0} tokens"; exit 1; }
grep '^stats: layer' "$T/err" >"$T/stats"
[ "$(wc -l <"$T/stats")" -eq 4 ] || { cat "$T/err"; echo "FAIL: expected 4 stats lines"; exit 1; }
# stats: layer L: experts touched T/N, largest share S (R x fair)
awk '{
    split($6, tn, "/"); ratio = substr($10, 2) + 0
    if (tn[1] < 0.9 * tn[2] || ratio > 3.0) { print "FAIL: " $0; bad = 1 } else print "ok: " $0
} END { exit bad }' "$T/stats" || exit 1
echo "PASS: $n_prompt-token prompt spreads over the experts of every layer"
