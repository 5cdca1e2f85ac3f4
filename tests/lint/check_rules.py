#!/usr/bin/env python3
"""Combination rules live in one table (src/parallel/compat.c, compat.h).

Fails when a message saying that two choices do not combine, or that one
needs another flag, appears in a C string anywhere under src/ other than the
table: such a check belongs in a row of the table, where option parsing,
the trainer, the dp setup, the schedules and the planner's search all see
it and tests/unit/test_compat enumerates it.

Usage: check_rules.py SRC_DIR   (exit 0: clean, 1: rules outside the table)
       check_rules.py selftest  (the checker on a made-up tree)

The patterns are the wordings of the rules the table holds ("does not
combine with", "X needs --Y", "works with --", the schedule's and the
model's "needs"); adjacent string literals are joined first, so a message
split over lines is still seen. A message that matches but is no rule
between choices is listed in ALLOWED with the reason.
"""
import os
import re
import sys

TABLE = os.path.join("parallel", "compat.c")
# the table's rows may also live in parallel/compat_*.c (compat_recipes.c)
TABLE_ROWS = re.compile(r"parallel/compat(_[a-z]+)?\.c$")

PATTERNS = [
    r"does not combine with",
    r"\bneeds --[a-z]",           # "--keep %d needs --out DIR", "--ps-servers needs --dp-mode ps"
    r"\bneeds --",
    r"works with --",             # "--dp-mode ps works with --tp 1 --pp 1", payload vs --zero
    r"interleaved schedule needs",
    r"need the interleaved schedule",
    r"interleaved needs",
    r"sequence parallelism needs",
    r"shards per micro-batch",
    r"with --tp needs",
    r"use it with --",
    r"--auto picks",                    # --auto against the flags it chooses
    r"--auto plans",
    r"ZeRO-2 and ZeRO-3 shard",         # --zero 2/3 with --pp
    r"--sequence-parallel: --tp",       # sequence parallelism against --seq
    r"sequence parallelism splits the sequence",
    r"needs a text tokenizer",          # --sample-prompt against token-id data
]
RULE = re.compile("|".join(PATTERNS))

# (file relative to src/, a piece of the message): matched, but not a rule
# between two choices of a run.
ALLOWED = {
    # `trident import`'s own flags: --tokenizer char reads its vocabulary
    # from a text, a requirement of the importer, not of a run's layout
    ("ckpt/import.c", "--tokenizer char needs --data TEXT"),
    # `trident eval`'s own flags: --task-out writes --task's predictions,
    # an output of that mode, not a choice of a run's layout
    ("train/eval.c", "--task-out %s needs --task FILE.jsonl"),
    # a flag's help text names the rule; the check is the table's row sp-tp
    ("train/options.c", "split LayerNorm and residual activations along the sequence"),
    # `trident plan`'s explanation of a fixed --virtual-stages that gives no
    # layout, after td_plan_check (the table's rows) refused every one
    ("planner/search.c", "chunks per stage: interleaved needs pp > 1"),
}

STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def strip_comments(text):
    """C comments out, strings and line structure kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":  # a string or character literal, to its closing quote
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def messages(text):
    """(line, joined text) of each run of adjacent string literals."""
    code = strip_comments(text)
    runs, cur, start, last_end = [], [], 0, -1
    for m in STRING.finditer(code):
        between = code[last_end:m.start()] if last_end >= 0 else None
        if cur and between is not None and between.strip() == "":
            cur.append(m.group(1))
        else:
            if cur:
                runs.append((start, "".join(cur)))
            cur, start = [m.group(1)], code.count("\n", 0, m.start()) + 1
        last_end = m.end()
    if cur:
        runs.append((start, "".join(cur)))
    return runs


def scan(src):
    """(file under src, line, message) of each rule outside the table."""
    found = []
    for root, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src)
            if TABLE_ROWS.match(rel.replace(os.sep, "/")):
                continue
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            for line, msg in messages(text):
                if not RULE.search(msg):
                    continue
                if any(rel == a and piece in msg for a, piece in ALLOWED):
                    continue
                found.append((rel, line, msg))
    return found


SELFTEST = {
    # split over lines, as the real ones are: seen
    "train/a.c": 'TD_CHECK(x, "--foo %d does not "\n         "combine with --bar", f);\n',
    # a "needs --" rule: seen
    "train/b.c": 'TD_CHECK(x, "--keep %d needs --out DIR", k);\n',
    # in a comment, a value-range check, and the table itself: not seen
    "train/c.c": '/* --foo does not combine with --bar */\nTD_CHECK(z, "--zero %d is not a stage", z);\n',
    "parallel/compat.c": 'snprintf(b, n, "--x needs --y");\n',
}


def selftest():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        for rel, text in SELFTEST.items():
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as fh:
                fh.write(text)
        got = sorted((rel, line) for rel, line, _ in scan(d))
    want = [("train/a.c", 1), ("train/b.c", 1)]
    print("check_rules selftest:", "ok" if got == want else f"FAILED: found {got}, want {want}")
    return 0 if got == want else 1


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    if sys.argv[1] == "selftest":
        return selftest()
    found = scan(sys.argv[1])
    for rel, line, msg in sorted(found):
        print(f"src/{rel}:{line}: a combination rule outside the table: \"{msg[:110]}\"")
    if found:
        print(f"check_rules: {len(found)} rule message(s) outside src/{TABLE}; "
              "make each a row of the table (include/trident/compat.h)")
        return 1
    print("check_rules: every combination rule is in the table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
