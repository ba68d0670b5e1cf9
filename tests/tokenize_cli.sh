#!/bin/sh
# `guild tokenize` end to end on llama.cpp's test vocabularies: stdin is read exactly as given (a final
# newline is tokenized), --no-bos adds nothing, BOS comes where the vocabulary asks, --parse-special turns
# control-token texts into their ids. Expected ids are those of llama.cpp's ggml-vocab-*.gguf.out files.
set -u
dir="${GUILD_FIXTURES:-}/tokenizer"
guild="${GUILD_BUILDDIR:-.}/guild"
if [ ! -f "$dir/ggml-vocab-llama-spm.gguf" ]; then
    echo "skipped: fixtures absent ($dir)"
    exit 77
fi
fail=0

# check VOCAB EXPECTED PRINTF-FORMAT [OPTIONS...]
check() {
    vocab=$1 want=$2 text=$3
    shift 3
    got=$(printf "$text" | "$guild" tokenize -m "$dir/ggml-vocab-$vocab.gguf" --ids "$@")
    if [ "$got" != "$want" ]; then
        echo "FAIL: $vocab '$text' $*: got '$got', expected '$want'"
        fail=1
    fi
}

check llama-spm "15043 3186" 'Hello world' --no-bos
check llama-spm "1 15043 3186" 'Hello world'
check llama-spm "1 15043 3186 13" 'Hello world\n'
check llama-spm "29871 12 13" '\t\n' --no-bos
check llama-spm "1678 15043" '   Hello' --no-bos
check llama-spm "1 1 15043" '<s>Hello' --parse-special
check gpt-2 "15496 11 995 0" 'Hello, world!' --no-bos
check gpt-2 "15496 11 995 0" 'Hello, world!'
check gpt-2 "220 220 18435" '   Hello'
check gpt-2 "50256 15496" '<|endoftext|>Hello' --parse-special
check deepseek-coder "32013 243 414 9489" '   Hello'
check deepseek-coder "17535 1835" 'Hello world' --no-bos

# The table form: one line per token with the piece, escaped where not printable.
out=$(printf 'Hi\n' | "$guild" tokenize -m "$dir/ggml-vocab-gpt-2.gguf")
want=$(printf '%s\n%s' " 17250 -> 'Hi'" "   198 -> '\n'")
if [ "$out" != "$want" ]; then
    printf 'FAIL: table output:\n%s\n' "$out"
    fail=1
fi

# Errors: usage without -m, a missing file.
"$guild" tokenize </dev/null >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: no -m should exit 2"; fail=1; }
msg=$("$guild" tokenize -m "$dir/no-such.gguf" </dev/null 2>&1)
[ $? -eq 1 ] && echo "$msg" | grep -q "no-such.gguf" || { echo "FAIL: missing file: $msg"; fail=1; }

exit $fail
