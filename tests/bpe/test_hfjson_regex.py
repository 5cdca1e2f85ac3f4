#!/usr/bin/env python3
"""A tokenizer.json's Split pre-tokenizer through PCRE2 (src/data/bpe_regex.c)
against another engine, Python's `regex` module (python3-regex, an
independent implementation with \\p{L}, \\p{N} and possessive Unicode
classes): for GPT-2's pattern and Llama 3's (as its tokenizer.json's Split
gives it), the pieces of the tiny Shakespeare text and of the generated
stress text must end at the same byte offsets. Hugging Face's "Isolated"
behaviour makes every match a piece and every gap between matches another;
both patterns match every character, so the gaps are empty and the pieces
are the matches of findall.
Usage: test_hfjson_regex.py TEST_BPE_HFJSON DATA_DIR"""
import os
import struct
import subprocess
import sys
import tempfile

import regex

PATTERNS = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}


def main():
    tool, data = sys.argv[1], sys.argv[2]
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        stress = os.path.join(tmp, "stress.txt")
        subprocess.run([tool, "stress", stress], check=True)
        for name, pattern in PATTERNS.items():
            pfile = os.path.join(tmp, name + ".re")
            with open(pfile, "w", encoding="utf-8") as f:
                f.write(pattern)
            for text_file in (os.path.join(data, "tinyshakespeare.txt"), stress):
                out = os.path.join(tmp, "ends")
                subprocess.run([tool, "split", pfile, text_file, out], check=True)
                with open(out, "rb") as f:
                    raw = f.read()
                have = list(struct.unpack(f"<{len(raw) // 4}I", raw))
                text = open(text_file, "rb").read().decode("utf-8")
                want = [m.end() for m in regex.finditer(pattern, text)]
                # character offsets to byte offsets
                ends, pos, nbytes = [], 0, 0
                for e in want:
                    nbytes += len(text[pos:e].encode("utf-8"))
                    pos = e
                    ends.append(nbytes)
                label = f"{name} on {os.path.basename(text_file)}"
                if ends == have:
                    print(f"ok   {label}: {len(have)} pieces, the same ends as Python regex {regex.__version__}")
                else:
                    i = next((k for k in range(min(len(ends), len(have))) if ends[k] != have[k]), min(len(ends), len(have)))
                    b = open(text_file, "rb").read()
                    start = ends[i - 1] if i else 0
                    print(f"FAIL {label}: {len(have)} pieces, Python regex {len(ends)}; first difference at piece {i}: "
                          f"PCRE2 ends at {have[i] if i < len(have) else None}, regex at {ends[i] if i < len(ends) else None} "
                          f"(text from byte {start}: {b[start:start + 24]!r})")
                    fails += 1
    print("hf regex: all passed" if not fails else f"hf regex: {fails} FAILED")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
