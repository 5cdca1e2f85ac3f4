#!/usr/bin/env python3
"""Checks of README.md and docs/*.md (ctest docs_flag_names, docs_figure_stamps).

    check_docs.py flag-names SRC_DIR TRIDENT   every --flag the pages name exists; README's command
                                               list names every export/import format and tokenizer
    check_docs.py stamps SRC_DIR               every figure is dated with its commit;
                                               links and anchors resolve; README <= 400 lines
    check_docs.py selftest SRC_DIR             the rules on made-up pages that break them

The figure-stamp rule is documented in docs/README.md ("Figures and their
stamps"); this file is its checker. Each failure is one line
"FILE:LINE: what is wrong"; the exit status is 1 when there is any.
"""
import os
import re
import subprocess
import sys
from datetime import date

README_MAX_LINES = 400
GENERATED = {"docs/flags.md"}  # written by scripts/gen_flag_docs.py: its own test (docs_flags)

# --- which pages ---------------------------------------------------------


def pages(src):
    out = ["README.md"]
    d = os.path.join(src, "docs")
    out += sorted(f"docs/{f}" for f in os.listdir(d) if f.endswith(".md"))
    return out


def read(src, rel):
    with open(os.path.join(src, rel), encoding="utf-8") as f:
        return f.read().split("\n")


# --- blocks: fenced code, tables, list items, images, paragraphs ---------

COMMENT = re.compile(r"^\s*<!--.*-->\s*$")
LIST_ITEM = re.compile(r"^( {0,3})([-*]|\d+\.) ")
IMAGE = re.compile(r"^\s*!\[")
HEADING = re.compile(r"^#{1,6} ")


class Block:
    def __init__(self, kind, start, lines, indent=0):
        self.kind, self.start, self.lines, self.indent = kind, start, lines, indent
        self.text = "\n".join(lines)
        self.exempt = False   # an HTML comment "<!-- not measured" right above it
        self.caption = None   # the block right above (for tables, code, list items)
        self.list_intro = None  # for list items: the paragraph that introduces the list


def blocks(lines):
    """Markdown blocks with their first line number (1-based)."""
    out, i, n = [], 0, len(lines)
    while i < n:
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if line.lstrip().startswith("```"):
            j = i + 1
            while j < n and not lines[j].lstrip().startswith("```"):
                j += 1
            out.append(Block("code", i + 1, lines[i:j + 1]))
            i = j + 1
            continue
        if COMMENT.match(line):
            out.append(Block("comment", i + 1, [line]))
            i += 1
            continue
        if HEADING.match(line):
            out.append(Block("heading", i + 1, [line]))
            i += 1
            continue
        if line.lstrip().startswith("|"):
            j = i
            while j < n and lines[j].lstrip().startswith("|"):
                j += 1
            out.append(Block("table", i + 1, lines[i:j]))
            i = j
            continue
        if IMAGE.match(line):
            out.append(Block("image", i + 1, [line]))
            i += 1
            continue
        m = LIST_ITEM.match(line)
        j = i + 1
        # a paragraph or list item runs to a blank line, a fence, a table,
        # a heading, or (for items) the next item at the same or lower indent
        while j < n and lines[j].strip() and not lines[j].lstrip().startswith(("```", "|")) \
                and not HEADING.match(lines[j]) and not COMMENT.match(lines[j]):
            mj = LIST_ITEM.match(lines[j])
            if mj and (m is None or len(mj.group(1)) <= len(m.group(1))):
                break
            j += 1
        out.append(Block("item" if m else "para", i + 1, lines[i:j], len(m.group(1)) if m else 0))
        i = j
    # captions, exemptions and list introductions
    for k, b in enumerate(out):
        prev = out[k - 1] if k else None
        if prev is not None and prev.kind == "comment" and "<!-- not measured" in prev.text:
            b.exempt = True
        if prev is not None and prev.kind not in ("heading", "comment"):
            b.caption = prev
        if b.kind == "item":
            j = k - 1
            while j >= 0 and out[j].kind in ("item", "code"):
                j -= 1
            if j >= 0 and out[j].kind == "para":
                b.list_intro = out[j]
            elif j >= 0 and out[j].kind == "comment" and j > 0 and out[j - 1].kind == "para":
                b.list_intro = out[j - 1]
    # a caption's exemption covers what it introduces
    for b in out:
        if b.caption is not None and b.caption.exempt and b.kind in ("table", "code", "image"):
            b.exempt = True
        if b.list_intro is not None and b.list_intro.exempt:
            b.exempt = True
    return out


# --- figure stamps ---------------------------------------------------------

STAMP = re.compile(r"\((\d{4}-\d{2}-\d{2}),\s+([0-9a-f]{7,40})\)")  # may wrap at the space
RATE = re.compile(r"\d[\d,.]*\s*(?:ms/step|ms|s/step|tokens/s|tok/s|MB/s|GB/s|GFLOP/s|TFLOP/s)\b"
                  r"|MFU\s+\d[\d.]*\s*%")


def has_stamp(b):
    return b is not None and STAMP.search(b.text) is not None


def stamp_failures(rel, bl):
    fails = []
    for b in bl:
        if b.exempt or b.kind in ("heading", "comment"):
            continue
        if b.kind == "table":
            if not (has_stamp(b) or has_stamp(b.caption)):
                fails.append(f"{rel}:{b.start}: a table without a (YYYY-MM-DD, commit) stamp in it or in its "
                             f"caption; a table of no measurements needs '<!-- not measured -->' above it")
        elif b.kind == "image":
            nxt = bl[bl.index(b) + 1] if bl.index(b) + 1 < len(bl) else None
            if not (has_stamp(b) or has_stamp(b.caption) or has_stamp(nxt)):
                fails.append(f"{rel}:{b.start}: an image without a stamp in its alt text or beside it")
        elif RATE.search(b.text):
            ok = has_stamp(b) or (b.kind in ("code", "item") and has_stamp(b.caption)) or \
                (b.kind == "item" and has_stamp(b.list_intro))
            if not ok:
                what = RATE.search(b.text).group(0)
                fails.append(f"{rel}:{b.start}: '{what}' is a measured rate or time without a (YYYY-MM-DD, "
                             f"commit) stamp in its {'block' if b.kind == 'code' else 'paragraph'} or the one above")
    return fails


def git_commit_dates(src, hashes):
    """{hash: commit date} for the hashes git knows; None without history."""
    try:
        subprocess.run(["git", "-C", src, "rev-parse", "--git-dir"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    out = {}
    for h in hashes:
        p = subprocess.run(["git", "-C", src, "log", "-1", "--format=%ad", "--date=short", f"{h}^{{commit}}", "--"],
                           capture_output=True, text=True)
        if p.returncode == 0 and p.stdout.strip():
            out[h] = p.stdout.strip()
    return out


# --- links and anchors -------------------------------------------------------

LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading):
    """GitHub's id of a heading."""
    t = re.sub(r"[`*_]", "", heading.strip().lstrip("#").strip()).lower()
    return re.sub(r"[^a-z0-9 -]", "", t).replace(" ", "-")


def anchors(lines):
    out, fence = set(), False
    for line in lines:
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and HEADING.match(line):
            out.add(slug(line))
    return out


# Pages other branches are writing at the same time as this one (issue 28);
# README and docs/README.md link them already. Remove a name once the page
# is in the repository: the test says when.
PENDING_PAGES = set()


def link_failures(src, rel, lines, notes):
    fails, fence = [], False
    here = os.path.dirname(rel)
    for no, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(here, path)) if path else rel
            if not os.path.exists(os.path.join(src, dest)):
                if dest in PENDING_PAGES:
                    continue
                fails.append(f"{rel}:{no}: link to {target}: {dest} does not exist")
                continue
            if frag and dest.endswith(".md") and frag not in anchors(read(src, dest)):
                fails.append(f"{rel}:{no}: link to {target}: {dest} has no heading #{frag}")
    for p in sorted(PENDING_PAGES):
        if os.path.exists(os.path.join(src, p)):
            notes.add(f"note: {p} exists now; remove it from PENDING_PAGES in tests/docs/check_docs.py")
    return fails


def cmd_stamps(src):
    fails, notes, stamps = [], set(), {}
    for rel in pages(src):
        lines = read(src, rel)
        if rel == "README.md" and len(lines) - (lines[-1] == "") > README_MAX_LINES:
            fails.append(f"README.md: {len(lines) - 1} lines; at most {README_MAX_LINES} (detail goes to docs/)")
        fails += link_failures(src, rel, lines, notes)
        if rel in GENERATED:
            continue
        bl = blocks(lines)
        fails += stamp_failures(rel, bl)
        for b in bl:
            for m in STAMP.finditer(b.text):
                stamps.setdefault((m.group(1), m.group(2)), f"{rel}:{b.start}")
    for (d, h), where in sorted(stamps.items(), key=lambda x: x[1]):
        try:
            date.fromisoformat(d)
        except ValueError:
            fails.append(f"{where}: stamp ({d}, {h}): {d} is not a date")
    known = git_commit_dates(src, sorted({h for _, h in stamps}))
    if known is None:
        notes.add("note: no git history here: the stamps' commits were not checked")
    else:
        for (d, h), where in sorted(stamps.items(), key=lambda x: x[1]):
            if h not in known:
                fails.append(f"{where}: stamp ({d}, {h}): no commit {h} in this repository's history")
            elif d < known[h]:
                fails.append(f"{where}: stamp ({d}, {h}): dated before its commit ({known[h]})")
    for n in sorted(notes):
        print(n)
    for f in fails:
        print(f)
    print(f"docs_figure_stamps: {len(stamps)} stamps in {len(pages(src))} pages; "
          f"{'FAILED: ' + str(len(fails)) + ' problems' if fails else 'every figure stamped, every link resolves'}")
    return 1 if fails else 0


# --- flag names ----------------------------------------------------------------

FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
CODE_SPAN = re.compile(r"`([^`]+)`")
# Words after which a flag belongs to another program, up to the next word
# naming trident (`trident`, `build/trident`, scripts/run.sh, which passes
# its arguments to trident train).
OTHER_TOOLS = {"mpirun", "mpiexec", "srun", "sbatch", "salloc", "#SBATCH", "scancel", "scontrol", "sinfo", "squeue",
               "cmake", "ctest", "git", "python3", "node", "npm", "docker", "gnuplot", "dd", "apt-get", "pip", "torchrun", "ompi_info",
               # the CUDA op check's programs (tests/gpu, docs/cuda.md)
               "test_cuda_ops", "cuda_ops_replay"}
TRIDENT_WORDS = re.compile(r"(^|/)trident$|(^|/)run\.sh$")
# Flags of other programs that the pages name in prose, without the program
# beside them (a program's word in the same code span or line is enough
# otherwise). Each with its owner:
OTHER_FLAGS = {
    "--allow-run-as-root": "mpirun: root may start ranks",
    "--oversubscribe": "mpirun: more ranks than cores",
    "--bind-to": "mpirun: --bind-to none, ranks float over the cores",
    "--map-by": "mpirun: --map-by slot fills hosts in order",
    "--shm-size": "docker run: the size of /dev/shm",
    "--mpi": "srun --mpi=pmix",
    "--num-layers-per-virtual-pipeline-stage": "Megatron-LM's pretrain_gpt.py (the planner's audit)",
}
# Flags named for commands other branches are adding at the same time
# (issue 28: trident eval, --config / --print-config). The test notes when
# one appears in a --help: remove it from here then.
PENDING_FLAGS = set()


def script_flags(src):
    """The options of the repository's own scripts: their `case` arms (--name)."""
    out = set()
    for d in ("scripts", "scripts/slurm", "bench"):
        full = os.path.join(src, d)
        if not os.path.isdir(full):
            continue
        for f in os.listdir(full):
            if f.endswith(".sh") or f.endswith(".sbatch"):
                with open(os.path.join(full, f), encoding="utf-8", errors="replace") as fh:
                    out |= set(re.findall(r"^\s*(--[a-z][a-z0-9-]*)(?:=\*)?\)", fh.read(), re.M))
    return out


def trident_flags(src, trident):
    p = subprocess.run([sys.executable, os.path.join(src, "scripts", "gen_flag_docs.py"), trident, "--names"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"docs_flag_names: gen_flag_docs.py --names failed: {p.stderr.strip()}")
    names = set(p.stdout.split())
    top = subprocess.run([trident, "--help"], capture_output=True, text=True).stdout
    return names | set(FLAG.findall(top))  # --help, --version


def spans(lines):
    """(line number, text) of what the pages write as commands: every code
    span of a prose line, every line of a fenced block."""
    fence = False
    for no, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            yield no, line
        else:
            for s in CODE_SPAN.findall(line):
                yield no, s
            rest = CODE_SPAN.sub(" ", line)
            if FLAG.search(rest):
                yield no, rest


def flags_in(text):
    """The --flags of `text` that belong to trident (not to another tool)."""
    owner = None
    for word in re.split(r"[\s|;()\[\],]+", text):
        if not word:
            continue
        w = word.strip("'\"")
        if TRIDENT_WORDS.search(w):
            owner = None
        elif w in OTHER_TOOLS or w.split("/")[-1] in OTHER_TOOLS:
            owner = w
        elif w == "--" and owner == "launch":
            owner = None
        elif w.endswith("launch.sh"):
            owner = "launch"
        for f in FLAG.findall(w):
            if owner is None or owner == "launch":
                yield f


def readme_command_failures(src, trident):
    """README's command list names every --format of export and import and
    every tokenizer of tokenize (as their --help lists them), and its mixture
    of experts recipe builds the llama family (hf-mixtral refuses gpt2's)."""
    lines = read(src, "README.md")
    fails = []

    def helps(cmd):
        p = subprocess.run([trident, cmd, "--help"], capture_output=True, text=True)
        return p.stdout + p.stderr

    want = {}
    for cmd in ("export", "import"):
        fmt = [l for l in helps(cmd).split("\n") if l.strip().startswith("--format")]
        want[cmd] = set(re.findall(r"\b(hf-[a-z0-9]+|safetensors|llmc)\b", fmt[0] if fmt else ""))
    usage = re.search(r"usage: trident tokenize --tokenizer (\S+)", helps("tokenize"))
    want["tokenize"] = set(usage.group(1).split("|")) if usage else set()
    for cmd, names in want.items():
        row = [(no, l) for no, l in enumerate(lines, 1) if l.startswith(f"build/trident {cmd} ")]
        if not names or not row:
            fails.append(f"README.md: no 'build/trident {cmd}' line in the command list, or no values in its --help")
            continue
        no, l = row[0]
        for n in sorted(names - set(re.split(r"[\s|\[\]]+", l))):
            fails.append(f"README.md:{no}: the command list's {cmd} line does not name {n} (its --help does)")
    for no, text in spans(lines):
        k = no - 1  # a command continued over lines ending in a backslash, whole
        while k > 0 and lines[k - 1].rstrip().endswith("\\"):
            k -= 1
            text = lines[k] + " " + text
        if "--moe-experts" in text and "train" in text and "--arch llama" not in text and "--model" not in text:
            fails.append(f"README.md:{no}: a mixture of experts recipe without --arch llama (hf-mixtral exports "
                         f"llama's family only)")
    return fails


def cmd_flag_names(src, trident):
    known = trident_flags(src, trident)
    ours = script_flags(src)
    fails, notes = [], set()
    fails += readme_command_failures(src, trident)
    for rel in pages(src):
        if rel in GENERATED:
            continue
        for no, text in spans(read(src, rel)):
            for f in flags_in(text):
                if f in known or f in ours or f in OTHER_FLAGS:
                    continue
                if f in PENDING_FLAGS:
                    continue
                fails.append(f"{rel}:{no}: {f} is not a flag of any trident command (nor of the repository's "
                             f"scripts); fix the page, or if it belongs to another program, name the program "
                             f"beside it")
    for f in sorted(PENDING_FLAGS & known):
        notes.add(f"note: {f} is in a --help now; remove it from PENDING_FLAGS in tests/docs/check_docs.py")
    for n in sorted(notes):
        print(n)
    for f in fails:
        print(f)
    print(f"docs_flag_names: {len(known)} trident flags, {len(ours)} script options; "
          f"{'FAILED: ' + str(len(fails)) + ' unknown' if fails else 'every flag the pages name exists'}")
    return 1 if fails else 0


def cmd_selftest(src):
    """The rules on pages made up to break them one at a time: a checker that
    cannot fail proves nothing."""
    head = git_commit_dates(src, ["HEAD"])
    real = subprocess.run(["git", "-C", src, "log", "-1", "--format=%h %ad", "--date=short"],
                          capture_output=True, text=True).stdout.split() if head is not None else []
    ok = f"({real[1]}, {real[0]})" if real else "(2026-12-01, ccc811a)"
    cases = [  # (page text, problems expected)
        ("| a | b |\n| --- | --- |\n| 1 | 2 |\n", 1),                       # table, no stamp
        (f"Caption {ok}:\n\n| a |\n| --- |\n| 1 |\n", 0),                  # stamped caption
        ("<!-- not measured -->\n| a |\n| --- |\n| 1 |\n", 0),               # exempt table
        ("A step took 12.5 ms here.\n", 1),                                     # a time, no stamp
        (f"A step took 12.5 ms here {ok}.\n", 0),
        ("It reached 10.4 GB/s and MFU 58%.\n", 1),
        (f"Measured {ok}:\n\n```\nstep 3 | 31.8 ms | 24130 tok/s\n```\n", 0),  # code under a caption
        ("Output:\n\n```\nstep 3 | 31.8 ms\n```\n", 1),
        (f"The figures {ok}:\n\n- one at 3 ms\n- two at 4 ms\n", 0),          # items under a stamped intro
        ("The figures:\n\n- one at 3 ms\n- two, no time\n", 1),
        ("![a plot](x.png)\n", 1),                                              # image, no stamp
        (f"![a plot {ok}](x.png)\n", 0),
        ("Sizes: 64 MiB, 8 bytes per parameter.\n", 0),                         # no rate: not a figure
    ]
    bad = 0
    for text, want in cases:
        got = stamp_failures("case", blocks(text.split("\n")))
        if len(got) != want:
            bad += 1
            print(f"selftest: stamps: {len(got)} problems, expected {want}, in:\n{text}{got}")
    if head is not None:
        for stamp, want in [(ok, True), ("(2026-12-01, 0000000)", False), ("(2000-01-01, " + real[0] + ")", False)]:
            m = STAMP.search(stamp)
            known = git_commit_dates(src, [m.group(2)])
            good = m.group(2) in known and m.group(1) >= known[m.group(2)]
            if good != want:
                bad += 1
                print(f"selftest: stamp {stamp} judged {'valid' if good else 'invalid'}")
    flag_cases = [  # (command text, flags of trident's it names)
        ("mpirun --allow-run-as-root -np 2 build/trident train --dp 2 --zero 1", ["--dp", "--zero"]),
        ("scripts/launch.sh --max-restarts 2 -- mpirun --oversubscribe trident train --out x", ["--max-restarts", "--out"]),
        ("srun --mpi=pmix -n 8 build/trident train --tp 2", ["--tp"]),
        ("ctest -R x --output-on-failure", []),
        ("--frobnicate 3", ["--frobnicate"]),
    ]
    for text, want in flag_cases:
        got = list(flags_in(text))
        if got != want:
            bad += 1
            print(f"selftest: flags of '{text}': {got}, expected {want}")
    print(f"docs_checker_selftest: {len(cases) + len(flag_cases) + (3 if head is not None else 0)} cases, "
          f"{'FAILED: ' + str(bad) if bad else 'every rule fails where it should and passes where it should'}")
    return 1 if bad else 0


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "selftest":
        return cmd_selftest(sys.argv[2])
    if len(sys.argv) >= 3 and sys.argv[1] == "stamps":
        return cmd_stamps(sys.argv[2])
    if len(sys.argv) >= 4 and sys.argv[1] == "flag-names":
        return cmd_flag_names(sys.argv[2], sys.argv[3])
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
