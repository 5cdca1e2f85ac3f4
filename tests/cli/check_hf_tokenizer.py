#!/usr/bin/python3
"""An independent GPT-2 tokenizer built from the vocab.json and merges.txt
that `trident export --format hf-gpt2` wrote, checked against trident.

Usage: check_hf_tokenizer.py DIR TEXT IDS

DIR is the exported directory; TEXT a UTF-8 file; IDS trident's token ids of
TEXT (int32, tests/bpe/bpe_tool encode). The tokenizer here is the one
OpenAI's encoder.py and Hugging Face's GPT2Tokenizer use, written from their
published algorithm, not from trident's code: GPT-2's pre-tokenization
pattern (python3-regex), bytes mapped to unicode by bytes_to_unicode, then
the classic bpe() loop over the merges' ranks (merge the lowest-ranked
adjacent pair everywhere it occurs, until no pair is a merge), then the
vocabulary's ids. Checked:
  - structure: 50257 vocabulary entries with ids 0..50256, <|endoftext|> =
    50256, 50000 merges after a "#version: 0.2" line, the 256 one-character
    entries are exactly bytes_to_unicode's alphabet, each merge joins two
    vocabulary entries into the entry whose id is 256 + its line number
    (GPT-2's vocabulary is the byte alphabet, then the merges in order);
  - every vocabulary entry, run through bpe() on its own, comes back as that
    one token (every merge is reachable and ranked consistently);
  - the ids of TEXT equal trident's, token for token.
"""
import json
import sys

import numpy as np
import regex

PAT = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def get_pairs(word):
    return set(zip(word[:-1], word[1:]))


class Tokenizer:
    def __init__(self, vocab, merges):
        self.encoder = vocab
        self.ranks = {m: i for i, m in enumerate(merges)}
        self.byte_encoder = bytes_to_unicode()
        self.cache = {}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        pairs = get_pairs(word)
        while pairs:
            bigram = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if bigram not in self.ranks:
                break
            first, second = bigram
            new_word = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    new_word.extend(word[i:])
                    break
                new_word.extend(word[i:j])
                i = j
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = get_pairs(word)
        self.cache[token] = word
        return word

    def encode(self, text):
        ids = []
        for piece in PAT.findall(text):
            piece = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self.bpe(piece))
        return ids


def main(argv):
    d, text_path, ids_path = argv[1:4]
    vocab = json.load(open(d + "/vocab.json", encoding="utf-8"))
    lines = open(d + "/merges.txt", encoding="utf-8").read().split("\n")
    assert lines[0] == "#version: 0.2" and lines[-1] == "", (lines[0], lines[-1])
    merges = [tuple(l.split(" ")) for l in lines[1:-1]]
    assert all(len(m) == 2 for m in merges), "a merge line is not two tokens"
    assert len(vocab) == 50257 and sorted(vocab.values()) == list(range(50257)), len(vocab)
    assert vocab["<|endoftext|>"] == 50256
    assert len(merges) == 50000 and len(set(merges)) == 50000, len(merges)
    alphabet = set(bytes_to_unicode().values())
    assert {t for t in vocab if len(t) == 1} == alphabet, "the one-character entries"
    assert all(vocab[t] < 256 for t in alphabet)
    for i, (a, b) in enumerate(merges):
        assert vocab.get(a, 1 << 30) < 256 + i and vocab.get(b, 1 << 30) < 256 + i, (i, a, b)
        assert vocab.get(a + b) == 256 + i, (i, a, b, vocab.get(a + b))
    print("ok   structure: 50257 entries, <|endoftext|> = 50256, 50000 merges, each joining two "
          "earlier entries into entry 256 + its line")
    tok = Tokenizer(vocab, merges)
    bad = [t for t in vocab if t != "<|endoftext|>" and tok.bpe(t) != (t,)]
    assert not bad, "%d entries do not merge back into themselves, e.g. %r -> %r" % (
        len(bad), bad[0], tok.bpe(bad[0]))
    print("ok   each of the 50256 entries merges back into itself through the merges alone")
    text = open(text_path, encoding="utf-8", newline="").read()
    ours = np.fromfile(ids_path, dtype="<i4").tolist()
    ref = tok.encode(text)
    if ours != ref:
        i = next((k for k, (x, y) in enumerate(zip(ours, ref)) if x != y), min(len(ours), len(ref)))
        print("FAIL tokenization: %d ids from trident, %d from vocab.json + merges.txt; first "
              "difference at token %d: trident %s, reference %s"
              % (len(ours), len(ref), i, ours[i:i + 5], ref[i:i + 5]))
        return 1
    print("ok   %d characters tokenized by vocab.json + merges.txt = trident's %d ids"
          % (len(text), len(ours)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
