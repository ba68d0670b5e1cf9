#!/bin/sh
# core/tokenizer's pre-tokenizer splits against a Python model of llama.cpp's (tests/tokenizer_pretok_ref.py).
py="${PYTHON:-python3}"
if [ "$py" = ":" ] || ! "$py" -c "import unicodedata" >/dev/null 2>&1; then
    echo "skipped: no python3"
    exit 77
fi
exec "$py" "${GUILD_SRCDIR:-.}/tests/tokenizer_pretok_ref.py" "${GUILD_BUILDDIR:-.}/tests/pretok_split"
