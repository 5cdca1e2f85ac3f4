#!/usr/bin/env python3
"""Every public header (include/trident/*.h) compiles alone, as C11 and as
C++17, and declares its functions with C linkage in C++.

A CUDA file (.cu, compiled as C++) includes the public headers to reach the
backend's table, the kernels' shapes and base's errors: a header that only C
accepts (_Noreturn, designated initializers or implicit void* conversions in
a static inline function, a missing include) breaks that build, and a header
without `extern "C"` compiles but declares C++-mangled names that the C
library does not define, so the failure only shows at link time. Each header
is compiled alone (one translation unit that includes it and nothing else),
so a header that leans on an earlier include is seen too.

Usage: check_headers.py CC CXX INCLUDE_DIR   (exit 0: clean, 1: a header failed)
       check_headers.py selftest CC CXX      (the checker on made-up headers)

The linkage check is textual: after the last #include of the header's
prologue, `#ifdef __cplusplus` / `extern "C" {` / `#endif`, and its closing
`#ifdef __cplusplus` / `}` / `#endif` after the last declaration (a header
whose last lines include another, as kernels_bf16.h includes kernels_f16.h,
may close before that include). One compiler run per language covers every
header; a language that fails is run again header by header, to name them.
"""
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

# The project's own definitions (CMakeLists.txt: -D_GNU_SOURCE); -Werror so a
# warning a .cu build would print (a C-style cast of a const away, say) fails.
COMMON = ["-fsyntax-only", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror"]
FLAGS = {
    "c": ["-x", "c", "-std=c11"] + COMMON,
    "c++": ["-x", "c++", "-std=c++17"] + COMMON,
}
OPEN = re.compile(r'#\s*ifdef\s+__cplusplus\s*\n\s*extern\s+"C"\s*\{\s*\n\s*#\s*endif')
CLOSE = re.compile(r'#\s*ifdef\s+__cplusplus\s*\n\s*\}\s*(//[^\n]*)?\n\s*#\s*endif')
INCLUDE = re.compile(r"^\s*#\s*include\b", re.M)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def linkage(text):
    """None when the header opens and closes extern "C" where it must, else why not."""
    code = COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    o = OPEN.search(code)
    if not o:
        return 'no `#ifdef __cplusplus extern "C" {` guard'
    c = None
    for c in CLOSE.finditer(code, o.end()):
        pass
    if not c:
        return 'the extern "C" guard is never closed'
    incs = [m.start() for m in INCLUDE.finditer(code)]
    if any(i > o.start() and i < c.start() for i in incs):
        return 'an #include inside the extern "C" guard (close it first, open it after)'
    # Between the close and the include guard's #endif: includes and blank lines only.
    tail = [l.strip() for l in code[c.end():].splitlines() if l.strip()]
    if any(not re.match(r"#\s*(include|endif)\b", l) for l in tail):
        return 'a declaration after the extern "C" guard closes'
    # Before the open: comments (gone), the include guard, includes, macros
    # (a #define may continue over lines ending in a backslash).
    cont = False
    for line in code[:o.start()].splitlines():
        s = line.strip()
        if s and not cont and not s.startswith("#"):
            return 'a declaration before the extern "C" guard opens: %r' % s[:60]
        cont = s.endswith("\\")
    return None


def compile_all(compiler, lang, incdir, headers):
    """(rc, output) of one compiler run over one translation unit per header:
    each header is still compiled alone, with one driver start for all."""
    with tempfile.TemporaryDirectory() as d:
        srcs = []
        for h in headers:
            src = os.path.join(d, h.replace(".", "_") + (".c" if lang == "c" else ".cc"))
            with open(src, "w") as f:
                f.write('#include "trident/%s"\n' % h)
            srcs.append(src)
        p = subprocess.run([compiler] + FLAGS[lang] + ["-I", incdir] + srcs,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    return p.returncode, p.stdout


def check(cc, cxx, incdir):
    """[(header, what failed, compiler output)], and the number of headers."""
    tdir = os.path.join(incdir, "trident")
    headers = sorted(h for h in os.listdir(tdir) if h.endswith(".h"))
    bad = []
    for h in headers:
        with open(os.path.join(tdir, h), encoding="utf-8") as fh:
            why = linkage(fh.read())
        if why:
            bad.append((h, "C++ linkage", why))
    langs = (("c", cc), ("c++", cxx))
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:
        # All headers in one run per language; a language that fails is
        # run again header by header, to say which ones.
        whole = {lang: ex.submit(compile_all, comp, lang, incdir, headers) for lang, comp in langs}
        jobs = {}
        for lang, comp in langs:
            if whole[lang].result()[0] != 0:
                for h in headers:
                    jobs[(h, lang)] = ex.submit(compile_all, comp, lang, incdir, [h])
        for (h, lang), fut in sorted(jobs.items()):
            rc, out = fut.result()
            if rc != 0:
                bad.append((h, "alone as " + ("C11" if lang == "c" else "C++17"), out.strip()))
    return bad, len(headers)


SELFTEST = {
    # clean: includes, then the guard, a static inline, the close
    "good.h": '#ifndef G\n#define G\n#include <stddef.h>\n#ifdef __cplusplus\nextern "C" {\n#endif\n'
              'static inline size_t g(size_t x) { return x; }\n#ifdef __cplusplus\n}\n#endif\n#endif\n',
    # C-only: _Noreturn (C++ rejects it), no guard
    "noreturn.h": '#ifndef N\n#define N\n_Noreturn void n(void);\n#endif\n',
    # guard present, but a void* converted implicitly in a static inline (C++ rejects it)
    "voidp.h": '#ifndef V\n#define V\n#ifdef __cplusplus\nextern "C" {\n#endif\n'
               'static inline int *v(void *p) { return p; }\n#ifdef __cplusplus\n}\n#endif\n#endif\n',
    # compiles both ways, but no extern "C": C++ would mangle l()
    "nolink.h": '#ifndef L\n#define L\nint l(int);\n#endif\n',
    # leans on an include it does not make (size_t): fails alone in both
    "alone.h": '#ifndef A\n#define A\n#ifdef __cplusplus\nextern "C" {\n#endif\nsize_t a(void);\n'
               '#ifdef __cplusplus\n}\n#endif\n#endif\n',
    # an include inside the guard
    "inside.h": '#ifndef I\n#define I\n#ifdef __cplusplus\nextern "C" {\n#endif\n#include "trident/good.h"\n'
                'int i(void);\n#ifdef __cplusplus\n}\n#endif\n#endif\n',
}


def selftest(cc, cxx):
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "trident"))
        for name, text in SELFTEST.items():
            with open(os.path.join(d, "trident", name), "w") as fh:
                fh.write(text)
        bad, n = check(cc, cxx, d)
    got = sorted((h, what) for h, what, _ in bad)
    want = sorted([
        ("alone.h", "alone as C11"), ("alone.h", "alone as C++17"),
        ("inside.h", "C++ linkage"),
        ("nolink.h", "C++ linkage"),
        ("noreturn.h", "C++ linkage"), ("noreturn.h", "alone as C++17"),
        ("voidp.h", "alone as C++17"),
    ])
    if got != want:
        print("check_headers selftest: got %s, want %s" % (got, want))
        return 1
    print("check_headers selftest: _Noreturn, a void* conversion, a missing include, a missing and a "
          "misplaced extern \"C\" seen; the clean header passes")
    return 0


def main(argv):
    if len(argv) == 4 and argv[1] == "selftest":
        return selftest(argv[2], argv[3])
    if len(argv) != 4:
        print(__doc__)
        return 2
    bad, n = check(argv[1], argv[2], argv[3])
    for h, what, out in bad:
        print("include/trident/%s: fails %s:\n  %s" % (h, what, out.replace("\n", "\n  ")))
    if bad:
        print("check_headers: %d of %d headers fail (a .cu file includes them as C++)" %
              (len({h for h, _, _ in bad}), n))
        return 1
    print("check_headers: %d headers compile alone as C11 and C++17, with C linkage" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
