#!/usr/bin/env python3
"""Dependencies point down: src/run (the run) includes nothing of src/train
(the command line above it).

src/train builds the run's spec (include/trident/run_spec.h) from the flags
and, on a resume, the checkpoint; src/run consumes the spec. A file under
src/run that includes include/trident/train.h (the flags' struct) or any
file of src/train would let the run read a flag again, so it fails here.

Usage: check_layers.py SRC_DIR   (exit 0: clean, 1: an include upward)
       check_layers.py selftest  (the checker on a made-up tree)

Includes are read after comments are removed, so a comment naming a header
is no include; both spellings of the path are seen ("trident/train.h",
"../train/x.h", and <...>).
"""
import os
import re
import sys

LOWER = "run"                                # the layer that must not look up
FORBIDDEN = [
    re.compile(r"^trident/train\.h$"),       # td_train_opts and train's commands
    re.compile(r"(^|/)train/"),              # any file of src/train, by a relative path
]
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def scan(src):
    """(file under src, line, included path) of each include upward."""
    found = []
    root = os.path.join(src, LOWER)
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, f)
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            # comments out, the line count kept
            code = COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
            for m in INCLUDE.finditer(code):
                inc = m.group(1)
                if any(p.search(inc) for p in FORBIDDEN):
                    found.append((os.path.relpath(path, src), code.count("\n", 0, m.start()) + 1, inc))
    return found


SELFTEST = {
    "run/a.c": '#include "trident/train.h"\n',           # seen
    "run/b.h": '#include <stdio.h>\n#include "../train/auto.h"\n',  # seen (line 2)
    "run/c.c": '/* #include "trident/train.h" */\n#include "trident/run_spec.h"\n',  # not seen
    "train/d.c": '#include "../run/run.h"\n#include "trident/train.h"\n',  # above: not checked
}


def selftest():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        for rel, text in SELFTEST.items():
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as fh:
                fh.write(text)
        got = sorted(scan(d))
    want = [("run/a.c", 1, "trident/train.h"), ("run/b.h", 2, "../train/auto.h")]
    if got != want:
        print("check_layers selftest: got %s, want %s" % (got, want))
        return 1
    print("check_layers selftest: the two upward includes seen, a comment and src/train's own not")
    return 0


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    if argv[1] == "selftest":
        return selftest()
    found = scan(argv[1])
    for rel, line, inc in found:
        print("src/%s:%d: includes %s: src/run reads the run's spec (trident/run_spec.h), never train's "
              "flags or files" % (rel, line, inc))
    if found:
        return 1
    print("check_layers: src/run includes nothing of src/train")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
