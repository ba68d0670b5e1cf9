#!/usr/bin/env python3
"""Pre-tokenizer splits of core/tokenizer (PCRE2) against an independent model of llama.cpp's.

llama.cpp (src/unicode.cpp, unicode_regex_split) runs each pre-tokenizer regex with std::regex: when the regex
names Unicode categories (\\p{N}, \\p{L}, ...) on a "collapsed" text where every non-ASCII code point becomes
one byte for its category (White_Space -> U+000B), the categories in the regex becoming those bytes plus their
ASCII members; otherwise with std::wregex on the code points, non-ASCII White_Space turned into U+000B. Each
regex splits every current span into matches and gaps and sees only that span. This script does the same with
Python's re (ASCII \\s, as std::regex's) and unicodedata, on the regexes exactly as llama.cpp writes them, and
checks that tests/pretok_split reports the same spans for random texts.

usage: tokenizer_pretok_ref.py PATH/TO/pretok_split
"""
import random
import re
import subprocess
import sys
import unicodedata

WHITE_SPACE = {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029,
               0x202F, 0x205F, 0x3000}

GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
CONTR = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
LLAMA3 = CONTR + "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
DEEPSEEK_LETTERS = "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943"
CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"

# llama.cpp's llm_tokenizer_bpe table, as written there (non-ASCII characters as escapes).
PRE = {
    "gpt-2": [GPT2],
    "default": ["[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2, "\\p{N}+", "[0-9][0-9][0-9]"],
    "llama-bpe": [LLAMA3],
    "deepseek-llm": ["[\r\n]", "\\s?[" + DEEPSEEK_LETTERS + "]+",
                     "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+", "\\s+$", CJK, "\\p{N}+"],
    "deepseek-coder": ["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", CJK, "\\p{N}"],
    "deepseek-v3": ["\\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
                    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
                    "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"],
    "falcon": ["[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2, "[0-9][0-9][0-9]"],
    "starcoder": ["\\p{N}", GPT2],
    "qwen2": [CONTR + "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"],
    "qwen35": [CONTR + "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"
               "|\\s+(?!\\S)|\\s+"],
    "gpt-4o": ["[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" + CONTR
               + "?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*" + CONTR
               + "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"],
    "tekken": ["[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])"
               "([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"],
    "seed-coder": [CONTR + "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"],
    "bailingmoe": ["'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                   "|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"],
    "poro-chat": [" ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"],
}

# unicode_regex_split's collapsing: category -> byte, and the ASCII members of each category.
CATEGORY = {"\\p{N}": "N", "\\p{L}": "L", "\\p{P}": "P", "\\p{M}": "M", "\\p{S}": "S",
            "\\p{Lu}": "L", "\\p{Ll}": "L", "\\p{Lt}": "L", "\\p{Lm}": "L", "\\p{Lo}": "L"}
BYTE = {"N": "\xd1", "L": "\xd2", "P": "\xd3", "M": "\xd4", "S": "\xd5"}
ASCII = {"N": "0-9", "L": "A-Za-z", "P": "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}", "M": "", "S": "\\$\\+<=>^`\\|"}


def collapse_regex(r):
    out, inside, i = "", False, 0
    while i < len(r):
        c = r[i]
        if c == "[" and (i == 0 or r[i - 1] != "\\"):
            out, inside, i = out + "[", True, i + 1
            continue
        if inside and c == "]" and r[i - 1] != "\\":
            out, inside, i = out + "]", False, i + 1
            continue
        if r.startswith("\\p{", i):
            j = r.find("}", i + 3)
            cat = CATEGORY.get(r[i:j + 1])
            if cat:
                s = BYTE[cat] + ASCII[cat]
                out += s if inside else "[" + s + "]"
                i = j + 1
                continue
        out, i = out + c, i + 1
    return out


def collapse_char(c):
    if ord(c) < 128:
        return c
    if ord(c) in WHITE_SPACE:
        return "\x0b"
    return BYTE.get(unicodedata.category(c)[0], "\xd0")


def split(text, regexes):
    collapsed = "".join(collapse_char(c) for c in text)
    wide = "".join("\x0b" if ord(c) > 0x7F and ord(c) in WHITE_SPACE else c for c in text)
    offsets = [len(text)]
    for r in regexes:
        use_collapsed = any(k in r for k in CATEGORY)
        pattern = collapse_regex(r) if use_collapsed else r
        if pattern.endswith("$"):
            pattern = pattern[:-1] + "\\Z"  # ECMAScript $ is the end only; Python's also matches before a final \n
        rx = re.compile(pattern, re.ASCII)
        subject = collapsed if use_collapsed else wide
        new, start = [], 0
        for off in offsets:
            seg, at = subject[start:start + off], 0
            for m in rx.finditer(seg):
                if m.end() == m.start():
                    continue
                if m.start() > at:
                    new.append(m.start() - at)
                new.append(m.end() - m.start())
                at = m.end()
            if at < off:
                new.append(off - at)
            start += off
        offsets = new
    spans, byte, cp = [], 0, 0
    for off in offsets:
        n = len(text[cp:cp + off].encode())
        spans.append((byte, n))
        byte, cp = byte + n, cp + off
    return spans


PIECES = (list("abcXYZ Hello world 0123456789 .,!?;:-_()[]{}<>/\\|@#%&*+=\"'`~^$")
          + [" ", "  ", "\n", "\r\n", "\t", " \n", "'s", "'T", "'re", "'LL", "'ve", "'m", "'d"]
          + list("\u180e\u00a0\u3000\u2028\u1680\u2009\u00e9\u00df\u00f1\u00c9\u0430\u0431\u0432\u0416\u03b1\u03a9"
                 "\u4e2d\u6587\u65e5\u306e\u3072\u30ab\u30ca\ud55c\uad6d\u0301\u0308\u0928\u092e\u0938\u094d\u0924\u0947"
                 "\u0645\u0631\u0663\U0001f999\U0001f600\u200d\ufe0f\u20ac\u00a3\u00a9\u00b1\u00d7\uff01\uff08"
                 "\uff5e\uff21\uff5a\u2460\u00b2\u00bd\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c\u2018\u201c"))


def main():
    tool = sys.argv[1]
    rng = random.Random(20240611)
    failures = 0
    for name, regexes in PRE.items():
        texts = ["".join(rng.choice(PIECES) for _ in range(rng.randint(0, 30))) for _ in range(300)]
        run = subprocess.run([tool, name], input=b"\0".join(t.encode() for t in texts), capture_output=True)
        if run.returncode != 0:
            print(f"{name}: pretok_split failed: {run.stderr.decode()}")
            failures += 1
            continue
        lines = run.stdout.decode().split("\n")
        bad = 0
        for text, line in zip(texts, lines):
            got = [tuple(map(int, s.split(","))) for s in line.split(";") if s]
            want = split(text, regexes)
            if got != want:
                bad += 1
                if bad <= 3:
                    b = text.encode()
                    print(f"{name}: {text!r}\n  llama.cpp: {[b[o:o + n].decode() for o, n in want]}\n"
                          f"  guild:     {[b[o:o + n].decode() for o, n in got]}")
        print(f"{name}: {len(texts) - bad}/{len(texts)} random texts split as llama.cpp does")
        failures += bad
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
