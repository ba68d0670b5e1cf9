# Sourced by the bench/device/*.sh scripts (a device call has a budget of seconds and must never hang):
#   say TEXT...             a timestamped line, with the seconds since t0
#   step LIMIT NAME CMD...  runs CMD under `timeout -s KILL LIMIT` and prints its exit status, or says it is
#                           skipped when LIMIT more seconds would go past the budget
#   prof NAME FLAGS...      bench/guild-cuda-prof on the model $m (32 decode steps, 14 threads) as a step of 60 s,
#                           its report in $O/prof-NAME.txt and on stdout
#   prompt8 FILE            session 26's text prompt (~3,000 tokens of guild-mkmodel's vocabulary) into FILE
#   run8 NAME BINDIR FLAGS...  BINDIR's guild run of $O/prompt.txt on the model $m at --gpu-mem 8G, 64 greedy
#                           tokens with --stats, as a step of 25 s: its stderr in $O/r-NAME.txt, the decode and
#                           hit-rate lines on stdout (issue 14's decode with a routing profile: lead.sh, lead_ab.sh)
#   setup NAME              the common start of a script run on an unpacked pack in $C (default /tmp/c): sets
#                           B (C/bin), BASE (C/base), R ($OUT, where the log and NAME-files.tar.gz go), O (a
#                           scratch folder), LD_LIBRARY_PATH, t0, commit and base_commit (C/COMMIT, C/BASE_COMMIT),
#                           sends the script's output to R/NAME.log as well (through a tee that runs until the
#                           script ends: wait for background steps by their pids, since a bare `wait` waits for the
#                           tee too and never returns), and says what runs where
#   finish NAME             packs O into R/NAME-files.tar.gz and says the script is done
#   begin NAME              an issue-17 call's start: bench/device/alltests.sh (three programs at a time, 130 s),
#                           setup NAME, the tests' lines that are not a pass, and the model m (model_make: guild-mkmodel's
#                           qwen3-30b-a3b shape, the pool fill) as a step
#   alltests_lines          the lines of $R/alltests.log that are not a pass (its failed steps and Checks lines)
#   begin_bare NAME         begin without the tests (variants of builds whose tests ran): setup NAME, model_make
#   alltests_new            alltests.sh on the pack's new build as a step of 140 s, then alltests_lines
#   fuse_ab NAME PROG PART [SIDE...]
#                           issue 17's call on a fused launch: begin_bare NAME, the pipeline traced with every expert
#                           on the GPU (new, base, var, new+off-PART, then new, base, var again), the CUDA test PROG
#                           (its output in $O/PART-test.txt) and alltests.sh on new, all-GPU decode of new, base,
#                           var, experts-in-RAM decode of the SIDEs if any; the model removed, finish NAME
#   turns_ab NAME [ram]     issue 17's call on one change: begin_bare NAME, the pipeline traced with every expert on
#                           the GPU, new and base in turns three times (with ram: then with the experts in RAM, new
#                           and base once), alltests.sh on new, all-GPU decode new, base, new2, base2; finish NAME
#   qkvnorm_ab NAME         fuse_ab NAME check_cuda_qkv_norm qkv-norm (s55b.sh, s56a.sh: the attention's block norm
#                           in its Q/K/V launch)
#   prog_test LIMIT LABEL LIBDIR PATH CASE LOG
#                           the Check program PATH with LIBDIR's libraries, the case CASE alone unless empty, as a step
#                           named "NAME CASE (LABEL)": its output in LOG, its Checks line and first failures on stdout
#   pack_test LIMIT LABEL DIR PROG CASE LOG
#                           prog_test of a CUDA test program of an unpacked test pack (DIR/bin/tests/cuda/PROG, DIR/lib)
#   grep_step LIMIT NAME PATTERN FILE CMD...
#                           CMD as a step named NAME: its output in FILE, its lines matching PATTERN (grep -E) on stdout
#   cuda_tool SIDE PROG     a side's CUDA test or timing program: PROG beside a var*/base* build, else $B/tests/cuda/PROG
#   attn_tl KEYS SIDE...    the decode attention alone, its phases (cuda_attn_time --timeline KEYS, KEYS one word of
#                           key counts) in each side's build (cuda_tool's): $O/attn-tl-SIDE.txt
#   step_tl WHAT SIDE...    the router's (router) or the attention's (attn) phases in the all-GPU step, guild-cuda-prof
#                           --no-trace --timeline WHAT on $m in each side's build (prof_bin's): $O/tl-WHAT-SIDE.txt
#   head_tl SIDE...         the router alone, its phases (cuda_head_time --timeline 1) of each side's build ($B's
#                           tests/cuda, or cuda_head_time beside a var*/base* build): $O/head-tl-SIDE.txt
#   bin_of SIDE             $BASE for a side named base*, $C/varb for varb*, $C/varc for varc*, $C/var for other
#                           var*, else $B (the A/B scripts' builds; pack-xz.sh packs /tmp/p40/var* and
#                           /tmp/p40/base*)
#   side_flags SIDE         the flags a side named NAME+off-PART runs with: --cuda-off PART (new+off-mm-split: the
#                           new build without its split products); none for other names
#   decode_ab KIND SIDE...  issue 17's decode on $m at 512 populated positions, SIDE by SIDE in turns (new, base, new2,
#                           base2...: bin_of's build, side_flags' flags): KIND gpu (every expert on the GPU, 64
#                           tokens) or ram (--gpu-experts none, 48 tokens), 3 runs each; JSON in $O/KIND-SIDE.json,
#                           the runs on stdout
#   prof_ab SIDE...         guild-cuda-prof --gpu-experts none on $m (issue 17's GPU time a layer, CUPTI) of each SIDE's
#                           build ($B/bench, $BASE or $C/var, as bin_of; side_flags' flags), 32 steps, 14 threads:
#                           $O/prof-SIDE.txt, its summary and busy a layer on stdout (layer_busy's, from the
#                           table, for a build that does not print it)
#   profg_ab SIDE...        guild-cuda-prof with every expert on the GPU (one CUDA graph a step) of each SIDE's build,
#                           32 steps, 14 threads: $O/profg-SIDE.txt, and dense_busy's line of it on stdout
#   dense_busy FILE LAYERS  the dense step's share of busy a layer from a profile's table (below)
#   prof_bin SIDE           the guild-cuda-prof of a side's build
#   sessions8 NAME BINDIR COMMIT REPEAT
#                           BINDIR's `guild bench sessions --sessions 1,2,4,8,16 --repeat REPEAT --probes 1` on $m
#                           at --gpu-mem 8G (issue 18's measure), stamped with COMMIT, as a step: its output in
#                           $O/sessions-NAME.txt, its JSON in $O/sessions-NAME.json, the tables on stdout
#   pipe_trace KIND SIDE [POPULATE]
#                           the pipeline's GPU worker traced (--gpu-prof) in a SIDE build's guild bench run (side_flags'
#                           flags) on $m at POPULATE (default 512) positions (KIND ram: --gpu-experts none; gpu: every
#                           expert on the GPU), one run of
#                           64 tokens after the warm-up: the trace in $O/trace-KIND-SIDE.trace (gzipped after),
#                           guild bench trace's report of its decode steps (the first 16 left out) in
#                           $O/trace-KIND-SIDE.txt, its summary and busiest kernels on stdout
#   timelines               guild-cuda-prof --no-trace --timeline router and attn on $m (cuda_timeline.h's stamps of each
#                           step's last layer), experts in RAM and every expert on the GPU: $O/tl-WHAT-EXPERTS.txt;
#                           then the same kernels alone (cuda_head_time --timeline 1, cuda_attn_time --timeline 512):
#                           $O/head-tl.txt, $O/attn-tl.txt; the timeline lines on stdout
#   turnaround SIDE...      issue 17's decode with experts in RAM (--gpu-experts none) at 512 populated positions,
#                           3 runs of 64 tokens, -v: each SIDE's CPU worker's pipeline profile lines (dense_turnaround_us:
#                           the dense side's part of a layer on the step's critical path as the CPU worker sees it)
#                           in $O/turn-SIDE.txt, the runs and those lines' turnaround on stdout (a build from
#                           538037a on gives each run's mean turnaround in its run line too)
# The caller sets t0 (date +%s at its start) and budget (seconds), or calls setup after setting budget; for prof, B
# (the packed bin folder), O (the output folder) and m (the model); for run8, O and m.
say() { echo "== $(date -u +%T) +$(($(date +%s) - t0))s $*"; }
step() { # LIMIT NAME CMD...
    lim=$1 name=$2
    shift 2
    if [ $(($(date +%s) - t0 + lim)) -gt "$budget" ]; then
        say "skipped (needs $lim s): $name"
        return 0
    fi
    say "$name"
    timeout -s KILL "$lim" "$@"
    echo "rc=$? ($name)"
}
prof() { # NAME FLAGS...
    name=$1
    shift
    step 60 "guild-cuda-prof $name: $*" sh -c '"$0" "$@" > "'"$O/prof-$name.txt"'"; st=$?; cat "'"$O/prof-$name.txt"'"; exit $st' \
        "$B/bench/guild-cuda-prof" -m "$m" --steps 32 --threads 14 "$@"
}
prompt8() { # FILE
    for i in $(seq 1 55); do
        printf 'The quick brown fox %d jumps over the lazy dog while the committee reviews chapter %d of the report. ' \
            "$i" "$i"
    done > "$1"
}
run8() { # NAME BINDIR FLAGS...: 64 greedy tokens of the prompt at --gpu-mem 8G with --stats
    n=$1 bin=$2
    shift 2
    step 25 "run 8G $n" sh -c 'g=$0 m=$1; shift; "$g" run -m "$m" -f "'"$O"'/prompt.txt" -n 64 --temp 0 \
        --threads 14 --ctx 4096 --batch 4096 --backend cuda --gpu-mem 8G --stats "$@" 2> "'"$O"'/r-'"$n"'.txt" \
        > /dev/null; st=$?; grep -i "hit rate\|decode:" "'"$O"'/r-'"$n"'.txt" | grep -v "^stats: layer"; exit $st' \
        "$bin/guild" $m "$@"
}
setup() { # NAME
    C=${C:-/tmp/c}
    export LD_LIBRARY_PATH=$C/lib
    B=$C/bin BASE=$C/base R=${OUT:-/tmp/guild-out} O=/tmp/guild-$1-out
    mkdir -p "$R" "$O"
    exec > >(tee -a "$R/$1.log") 2>&1
    t0=$(date +%s)
    commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
    base_commit=$(cat "$C/BASE_COMMIT" 2> /dev/null || echo unknown)
    say "$1: commit $commit base $base_commit; budget ${budget:-?} s;" \
        "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -n 1)"
    lscpu > "$O/lscpu.txt" 2>&1
}
model_make() { # the model m: guild-mkmodel's qwen3-30b-a3b shape, the pool fill, as a step
    m=/tmp/q30b.gguf
    step 40 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
        --threads "$(nproc)" -q -o $m
}
# alltests_lines: what of $R/alltests.log is not a pass (bench/device/alltests.sh's log: failed steps, Checks lines)
alltests_lines() { grep -E "rc=|Checks|FAIL|tests done" "$R/alltests.log" | grep -v "^rc=0" | tail -n 30; }
begin() { # NAME
    bash bench/device/alltests.sh 130 0 3 > /dev/null 2>&1
    setup "$1"
    alltests_lines
    model_make
}
begin_bare() { # NAME: begin without the tests (measurement variants of builds whose tests ran)
    setup "$1"
    model_make
}
alltests_new() { # every CUDA test program of the pack's new build (alltests.sh) as a step, its failures on stdout
    step 140 "alltests.sh (new)" sh -c 'bash bench/device/alltests.sh 125 0 3 > /dev/null 2>&1'
    alltests_lines
}
qkvnorm_ab() { fuse_ab "$1" check_cuda_qkv_norm qkv-norm; }
turns_ab() { # NAME [ram]: new against base in turns (the measure first), then the tests, then decode
    begin_bare "$1"
    for side in new base new2 base2 new3 base3; do pipe_trace gpu "$side"; done
    [ "${2:-}" = ram ] && for side in new base; do pipe_trace ram "$side"; done
    alltests_new
    decode_ab gpu new base new2 base2
    rm -f "$m"
    finish "$1"
}
attn_ab() { # NAME KEYS: an attention change, new against base: alone at KEYS (words), the step in turns, the step's
    # attention phases, then the tests, then decode
    begin_bare "$1"
    attn_tl "$2" new base
    for side in new base new2 base2; do pipe_trace gpu "$side"; done
    step_tl attn new base
    alltests_new
    decode_ab gpu new base new2 base2
    rm -f "$m"
    finish "$1"
}
fuse_ab() { # NAME PROG PART [SIDE...]: the measure first (device time has been short), then the tests, then decode
    begin_bare "$1"
    for side in new base var "new+off-$3" new2 base2 var2; do pipe_trace gpu "$side"; done
    pack_test 60 new "$C" "$2" "" "$O/${3}-test.txt"
    alltests_new
    decode_ab gpu new base var
    [ $# -gt 3 ] && decode_ab ram "${@:4}"
    rm -f "$m"
    finish "$1"
}
prog_test() { # LIMIT LABEL LIBDIR PATH CASE LOG: the Check program PATH (LIBDIR's libraries; CK_RUN_CASE=CASE
    # unless empty) as a step named "NAME CASE (LABEL)", its output in LOG, its Checks line and first failures on stdout
    step "$1" "$(basename "$4") $5 ($2)" env LD_LIBRARY_PATH="$3" CK_DEFAULT_TIMEOUT=60 ${5:+CK_RUN_CASE=$5} \
        sh -c '"$0" > "$1" 2>&1; st=$?; grep -E "Checks|:F:" "$1" | head -n 4 | cut -c1-200; exit $st' "$4" "$6"
}
pack_test() { # LIMIT LABEL DIR PROG CASE LOG: prog_test of DIR/bin/tests/cuda/PROG with DIR/lib's libraries
    prog_test "$1" "$2" "$3/lib" "$3/bin/tests/cuda/$4" "$5" "$6"
}
grep_step() { # LIMIT NAME PATTERN FILE CMD...: CMD as a step, its output in FILE, its lines matching PATTERN on stdout
    g_pat=$3 g_file=$4
    lim=$1 name=$2
    shift 4
    step "$lim" "$name" sh -c 'p=$1 f=$2; shift 2; "$@" > "$f" 2>&1; st=$?; grep -E "$p" "$f"; exit $st' sh "$g_pat" \
        "$g_file" "$@"
}
# cuda_tool SIDE PROG: a side's CUDA test or timing program (beside a var*/base* build, else the packed tests/cuda)
cuda_tool() { case $1 in var* | base*) echo "$(bin_of "$1")/$2" ;; *) echo "$B/tests/cuda/$2" ;; esac; }
head_tl() { # SIDE...: the router alone, its phases (cuda_head_time --timeline 1) in each side's build
    for side in "$@"; do
        grep_step 30 "cuda_head_time --timeline 1 ($side)" "^timeline" "$O/head-tl-$side.txt" \
            "$(cuda_tool "$side" cuda_head_time)" --timeline 1
    done
}
attn_tl() { # KEYS SIDE...: the decode attention alone, its phases (cuda_attn_time --timeline KEYS: words) in each side's
    # build: $O/attn-tl-SIDE.txt
    keys=$1
    shift
    for side in "$@"; do
        # shellcheck disable=SC2086 # keys: words
        grep_step 40 "cuda_attn_time --timeline $keys ($side)" "^timeline" "$O/attn-tl-$side.txt" \
            "$(cuda_tool "$side" cuda_attn_time)" --timeline $keys
    done
}
step_tl() { # WHAT SIDE...: the router's or attention's phases in the all-GPU step (guild-cuda-prof --timeline WHAT) in
    # each side's build (with its side_flags: main+off-mm-split): $O/tl-WHAT-SIDE.txt
    what=$1
    shift
    for side in "$@"; do
        # shellcheck disable=SC2046 # side_flags: words without blanks
        grep_step 40 "guild-cuda-prof --timeline $what, every expert on the GPU ($side)" "step wall|^timeline" \
            "$O/tl-$what-$side.txt" "$(prof_bin "$side")" -m "$m" --steps 32 --threads 14 --no-trace --timeline "$what" \
            $(side_flags "$side")
    done
}
finish() { # NAME
    tar -czf "$R/$1-files.tar.gz" -C "$O" .
    say "$1 done"
}
sessions8() { # NAME BINDIR COMMIT REPEAT
    step $((25 + 12 * $4)) "guild bench sessions 1-16 at 8G ($1)" \
        sh -c '"$0" "$@" > "'"$O"'/sessions-'"$1"'.txt" 2>&1; st=$?;
        grep -E "^(sessions| +[0-9]+ +[0-9])" "'"$O"'/sessions-'"$1"'.txt"; exit $st' \
        "$2/guild" bench sessions -m "$m" --gpu-mem 8G --sessions 1,2,4,8,16 --prompt 128 --gen 16 \
        --repeat "$4" --probes 1 --commit "$3" --json "$O/sessions-$1.json"
}
bin_of() {
    case $1 in base*) echo "$BASE" ;; varb*) echo "$C/varb" ;; varc*) echo "$C/varc" ;; var*) echo "$C/var" ;;
        *) echo "$B" ;; esac
}
side_flags() { case $1 in *+off-*) echo "--cuda-off ${1#*+off-}" ;; esac; }
decode_ab() { # KIND SIDE...
    kind=$1 what="all-GPU decode" lim=20 extra="--gen 64"
    [ "$kind" = ram ] && what="experts in RAM decode" lim=35 extra="--gen 48 --gpu-experts none"
    shift
    for side in "$@"; do
        # shellcheck disable=SC2086,SC2046 # extra, side_flags: words without blanks
        step $lim "$what ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 " | tail -n 4' \
            "$(bin_of "$side")/guild" bench run -m "$m" --populate 512 --runs 3 $extra --json "$O/$kind-$side.json" \
            $(side_flags "$side")
    done
}
prof_ab() { # SIDE...
    for side in "$@"; do
        pb=$(prof_bin "$side")
        # shellcheck disable=SC2046 # side_flags: words without blanks
        step 40 "guild-cuda-prof --gpu-experts none ($side)" sh -c '"$0" "$@" > "'"$O"'/prof-'"$side"'.txt" 2>&1;
            st=$?; grep -E "step wall|GPU busy|attn_decode|busy a layer" "'"$O"'/prof-'"$side"'.txt" | head -n 6;
            exit $st' "$pb" -m "$m" --steps 32 --threads 14 --gpu-experts none $(side_flags "$side")
        grep -q "busy a layer" "$O/prof-$side.txt" 2> /dev/null || layer_busy "$O/prof-$side.txt" 48
    done
}
profg_ab() { # SIDE...
    for side in "$@"; do
        step 40 "guild-cuda-prof, every expert on the GPU ($side)" sh -c '"$0" "$@" > "'"$O"'/profg-'"$side"'.txt" 2>&1' \
            "$(prof_bin "$side")" -m "$m" --steps 32 --threads 14
        dense_busy "$O/profg-$side.txt" 48
    done
}
# layer_busy FILE LAYERS [NAMES]: guild-cuda-prof's "busy a layer" (prof_summary_layer_ns) from its table, for builds
# before it printed the line: n/step x busy us of the names launched at least LAYERS/4 times a step, over LAYERS;
# with NAMES (an awk regular expression) only the names it matches, printed as dense_busy's line
layer_busy() {
    awk -v L="$2" -v N="${3:-}" '/^busy us:/ {t = 1; next} t && /^kernel / {next} t && NF == 0 {t = 0}
        t && NF >= 8 && 4 * $(NF - 6) >= L && (N == "" || $1 ~ N) {s += $(NF - 6) * $NF; n++}
        END {printf "%sbusy a layer (from the table): %.2f us (%d kernel names, %d layers)\n", N == "" ? "" : "dense ",
            s / L, n, L}' "$1"
}
# dense_busy FILE LAYERS: the part of "busy a layer" that is the dense step's kernels (the norms, the products, the
# attention, the router: names starting rmsnorm_cl, matmul_q, qk_prepare, attn_decode, router_cluster), for a profile
# with the experts' kernels beside them (every expert on the GPU); from the table, for builds before guild-cuda-prof
# printed its own "dense busy a layer" line (session 47: the same kernels, named as all but expert...)
dense_busy() { layer_busy "$1" "$2" '^(rmsnorm_cl|matmul_q|qk_prepare|attn_decode|router_cluster)'; }
# prof_bin SIDE: the guild-cuda-prof of a side's build (bin_of's folder; the packed build's under bench/)
prof_bin() { case $1 in base* | var*) echo "$(bin_of "$1")/guild-cuda-prof" ;; *) echo "$B/bench/guild-cuda-prof" ;; esac; }
pipe_trace() { # KIND SIDE [POPULATE]: POPULATE positions (512, issue 17's) before the 64 traced tokens
    kind=$1 side=$2 pop=${3:-512} extra=""
    [ "$kind" = ram ] && extra="--gpu-experts none"
    f=$O/trace-$kind-$side.trace
    # shellcheck disable=SC2086 # extra: words without blanks
    # shellcheck disable=SC2046 # side_flags: words without blanks
    step 60 "pipeline trace, $kind ($side)" sh -c 'p=$0; "$@" 2>&1 | grep -E "run [0-9]:|^ +$p " | tail -n 3' \
        "$pop" "$(bin_of "$side")/guild" bench run -m "$m" --populate "$pop" --runs 1 --gen 64 $extra --gpu-prof "$f" \
        $(side_flags "$side")
    step 30 "guild bench trace ($kind, $side)" sh -c '"$0" bench trace "$1" --skip 16 > "$2" 2>&1; st=$?;
        grep -E "step wall|GPU busy|idle:|busy a layer|^(router|rmsnorm_cl|matmul|attn_decode|qk_prep|xchg|expert)" \
        "$2" | head -n 24; exit $st' "$(bin_of "$side")/guild" "$f" "$O/trace-$kind-$side.txt"
    [ -f "$f" ] && gzip -f "$f"
}
timelines() {
    for what in router attn; do
        for experts in none all; do
            grep_step 40 "guild-cuda-prof --timeline $what --gpu-experts $experts" "step wall|^timeline" \
                "$O/tl-$what-$experts.txt" "$B/bench/guild-cuda-prof" -m "$m" --steps 32 --threads 14 --no-trace \
                --timeline "$what" --gpu-experts "$experts"
        done
    done
    grep_step 40 "cuda_head_time --timeline 1" "^timeline" "$O/head-tl.txt" "$B/tests/cuda/cuda_head_time" --timeline 1
    grep_step 40 "cuda_attn_time --timeline 512" "^timeline" "$O/attn-tl.txt" "$B/tests/cuda/cuda_attn_time" --timeline 512
}
turnaround() { # SIDE...
    for side in "$@"; do
        # shellcheck disable=SC2046 # side_flags: words without blanks
        step 40 "turnaround ($side)" sh -c '"$0" "$@" > "'"$O"'/turn-'"$side"'.txt" 2>&1; st=$?;
            grep -E "run [0-9]:" "'"$O"'/turn-'"$side"'.txt" | tail -n 3;
            grep -o "dense_turnaround_us=[0-9.]* (median of [0-9]*)" "'"$O"'/turn-'"$side"'.txt"; exit $st' \
            "$(bin_of "$side")/guild" bench run -m "$m" --populate 512 --runs 3 --gen 64 --gpu-experts none -v \
            $(side_flags "$side")
    done
}
