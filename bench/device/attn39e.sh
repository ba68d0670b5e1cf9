#!/usr/bin/env bash
# Session 39's head-blocks call (issue 17): a KV head's 8 query heads over two blocks (cuda_attn_form_t.head_blocks),
# from the repo root with a pack in $C (bin/: the build with one block a KV head by default, check_cuda_fused and
# cuda_attn_time; hb2/: the same tree built with two by default: guild, its workers and guild-cuda-prof):
#   C=/tmp/c bash bench/device/attn39e.sh [SECONDS]
# 1. check_cuda_fused (two forms with two blocks a KV head, bit for bit against the merge kernel);
# 2. cuda_attn_time --short 128 512 2048 (its "2 head blocks" variant against the default, bits and time);
# 3. the Qwen3-30B-A3B shape: all-GPU decode one block / two blocks in turns, guild-cuda-prof --gpu-experts none
#    of both, then decode with every expert in RAM.
# Output under $OUT: attn39e.log and attn39e-files.tar.gz.
set -u
budget=${1:-200}
. bench/device/lib.sh # say, step, setup, finish, bin_of, decode_ab, prof_ab
setup attn39e
BASE=$C/hb2 # decode_ab's "base" sides: two blocks a KV head
step 60 "check_cuda_fused" sh -c '"$0" > "'"$O"'/check_cuda_fused.txt" 2>&1; st=$?;
    tail -n 3 "'"$O"'/check_cuda_fused.txt"; grep -c "two blocks a KV head" "'"$O"'/check_cuda_fused.txt"; exit $st' \
    "$B/tests/cuda/check_cuda_fused"
step 30 "cuda_attn_time --short 128 512 2048" sh -c '"$0" "$@" 2>&1 | tee "'"$O"'/time.txt" |
    sed "s/; block a split.*9 blocks a row [0-9.]* \[[a-z ]*\];//"' "$B/tests/cuda/cuda_attn_time" --short 128 512 2048
m=/tmp/q30b.gguf
step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish attn39e; exit 1; }
decode_ab gpu new base new2 base2
prof_ab new base
decode_ab ram new base
rm -f $m
finish attn39e
