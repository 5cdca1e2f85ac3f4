/* The regex pre-tokenizer's work bound (src/data/bpe_regex.c): each piece
 * may take TD_BPE_REGEX_STEPS_PER_BYTE steps a byte. GPT-2's, cl100k's and
 * Llama 3's patterns (Llama 3's tokenizer.json Split is cl100k's), o200k's
 * and the Digits stage split the Shakespeare text and a
 * stress text (long runs of spaces, digits, punctuation, letters) within a
 * 16th of that: each runs under a budget of a 16th (4 steps a byte) and the
 * share it used at the full budget is printed, counted in steps, not time.
 * A pattern that backtracks over the whole line, (?:a|b)*?c on 1 MiB of 'a'
 * (once over 120 s; on shorter texts PCRE2's JIT sees at once that no 'c'
 * is there), is refused: exit status 2 and one error line naming
 * the pattern. Usage: test_bpe_regex_budget DATA_DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/data/bpe_internal.h"
#include "trident/base.h"

static const char *patterns[][2] = {
    {"gpt2", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
    {"cl100k/llama3", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"o200k",
     "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}"
     "\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}"
     "\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"digits", "\\p{N}+"},
};

static size_t pieces;
static void count(void *ctx, size_t a, size_t b) { (void)ctx, (void)a, (void)b, pieces++; }

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    TD_CHECK(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc(*n + 1);
    TD_CHECK(s && fread(s, 1, *n, f) == *n, "cannot read %s", path);
    fclose(f);
    return s;
}

/* runs of 64 KiB: spaces, digits, punctuation, letters, newlines */
static char *stress(size_t *n) {
    const char *fill = " 7.x\n";
    size_t run = 65536;
    *n = run * strlen(fill);
    char *s = malloc(*n);
    for (size_t k = 0; fill[k]; k++) memset(s + k * run, fill[k], run);
    return s;
}

static td_bpe_regex *one(const char *pattern) {
    td_bpe_regex *r = td_bpe_regex_new();
    td_err e = {0};
    TD_CHECK(td_bpe_regex_add(r, pattern, strlen(pattern), 0, &e) == 0, "%s", e.msg);
    return r;
}

int main(int argc, char **argv) {
    TD_CHECK(argc == 2, "usage: test_bpe_regex_budget DATA_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tinyshakespeare.txt", argv[1]);
    size_t nt, ns;
    char *texts[2] = {read_all(path, &nt), stress(&ns)};
    size_t lens[2] = {nt, ns};
    const char *names[2] = {"tinyshakespeare", "stress"};
    int fails = 0;
    for (size_t p = 0; p < sizeof patterns / sizeof *patterns; p++)
        for (int t = 0; t < 2; t++) {
            td_bpe_regex *r = one(patterns[p][1]);
            td_bpe_regex_scratch *sc = td_bpe_regex_scratch_new(r);
            uint64_t used, budget;
            pieces = 0;
            td_bpe_regex_split(r, sc, (const unsigned char *)texts[t], lens[t], count, NULL);
            td_bpe_regex_scratch_usage(sc, &used, &budget);
            size_t full = pieces;
            /* a 16th of the budget still splits it, into the same pieces */
            td_bpe_regex_scratch_budget(sc, TD_BPE_REGEX_STEPS_PER_BYTE / 16);
            pieces = 0;
            td_bpe_regex_split(r, sc, (const unsigned char *)texts[t], lens[t], count, NULL);
            int ok = pieces == full && full > 0 && used * 16 < budget;
            printf("%s %s: %s %zu pieces, %llu of %llu steps (%.2f%%, %.2f a byte)\n",
                   ok ? "ok" : "FAIL", patterns[p][0], names[t], full, (unsigned long long)used,
                   (unsigned long long)budget, 100.0 * (double)used / (double)budget,
                   (double)used / (double)lens[t]);
            fails += !ok;
            td_bpe_regex_scratch_free(sc);
            td_bpe_regex_free(r);
        }

    /* the backtracking pattern: a child process dies with one error line */
    int fd[2];
    TD_CHECK(pipe(fd) == 0, "pipe");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        size_t n = 1 << 20;
        char *a = malloc(n);
        memset(a, 'a', n);
        td_bpe_regex *r = one("(?:a|b)*?c");
        td_bpe_regex_split(r, td_bpe_regex_scratch_new(r), (const unsigned char *)a, n, count,
                           NULL);
        _exit(0);
    }
    close(fd[1]);
    char err[4096] = {0};
    size_t got = 0;
    ssize_t k;
    while (got < sizeof err - 1 && (k = read(fd[0], err + got, sizeof err - 1 - got)) > 0) got += k;
    int st = 0;
    waitpid(pid, &st, 0);
    int lines = 0;
    for (size_t i = 0; i < got; i++) lines += err[i] == '\n';
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 2 && lines == 1 &&
             strstr(err, "trident: error: ") == err && strstr(err, "'(?:a|b)*?c'");
    printf("%s (?:a|b)*?c on 1 MiB of 'a' refused: %s", ok ? "ok" : "FAIL", err);
    fails += !ok;
    free(texts[0]), free(texts[1]);
    printf("%s\n", fails ? "FAILED" : "all passed");
    return fails != 0;
}
