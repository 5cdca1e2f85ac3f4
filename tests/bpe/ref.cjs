// The reference side of the BPE tokenizer tests and benchmark: js-tiktoken
// (getEncoding("gpt2" | "cl100k_base" | "o200k_base"), ordinary encoding:
// encode(text, [], []) treats a literal <|endoftext|> as text) run by node.
// PKG is the directory whose node_modules holds js-tiktoken
// (scripts/js_tiktoken.sh dir); ENC is trident's name for the encoding
// (gpt2, cl100k, o200k; default gpt2).
//   node ref.cjs compare PKG ENC TEXT IDS [TEXT IDS...]
//                                              trident's int32 ids (IDS) equal
//                                              the reference's for each TEXT;
//                                              else prints the first mismatch,
//                                              exit 1
//   node ref.cjs bench PKG TEXT SECONDS [ENC]  the reference's encoding MB/s
//   node ref.cjs stress SEED OUT [PARTS REPEAT]
//                                              writes the generated stress text
//                                              (PARTS random pieces, 20000; long
//                                              words of up to REPEAT words, 90)
//   node ref.cjs soup SEED OUT                 writes a text of 40000 characters
//                                              drawn from a small alphabet of
//                                              the patterns' edge cases
//   node ref.cjs classes TABLE                 TABLE (one byte per code point,
//                                              from bpe_tool classes) equals
//                                              \p{Lu} ... \p{M}, \p{N}, \s of
//                                              this node
'use strict';
const fs = require('fs');
const path = require('path');
const [mode, ...args] = process.argv.slice(2);

const encodings = { gpt2: 'gpt2', cl100k: 'cl100k_base', o200k: 'o200k_base' };
function encoder(pkg, name) {
  const mod = path.join(pkg, 'node_modules', 'js-tiktoken');
  const version = require(path.join(mod, 'package.json')).version;
  if (version !== '1.0.21') throw new Error(`js-tiktoken ${version} in ${pkg}, the reference is 1.0.21`);
  if (!encodings[name || 'gpt2']) throw new Error(`encoding ${name}: valid are ${Object.keys(encodings)}`);
  return require(mod).getEncoding(encodings[name || 'gpt2']);
}

// Buffer.toString('utf8') keeps a byte-order mark (TextDecoder would drop it)
const readText = (f) => fs.readFileSync(f).toString('utf8');

if (mode === 'compare') {
  // pairs TEXT IDS after ENC, so that one node (its ranks parsed once)
  // checks every text of a tokenizer
  const [pkg, encName, ...pairs] = args;
  const enc = encoder(pkg, encName);
  for (let p = 0; p + 1 < pairs.length; p += 2) compareOne(enc, encName, pairs[p], pairs[p + 1]);
} else if (mode === 'bench') {
  const [pkg, textFile, seconds, encName] = args;
  const enc = encoder(pkg, encName);
  const text = readText(textFile);
  const bytes = fs.statSync(textFile).size;
  enc.encode(text.slice(0, 100000), [], []); // warm up the JIT
  let best = Infinity, runs = 0, n = 0;
  const until = Date.now() + 1000 * Number(seconds || 0);
  do {
    const t0 = process.hrtime.bigint();
    n = enc.encode(text, [], []).length;
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
    runs++;
  } while (Date.now() < until);
  console.log(`js-tiktoken 1.0.21 ${encodings[encName || 'gpt2']} (node ${process.version}): ` +
              `${(bytes / 1e6 / best).toFixed(2)} MB/s ` +
              `(${n} tokens, best of ${runs})`);
} else if (mode === 'stress') {
  const [seed, out, parts, repeat] = args;
  fs.writeFileSync(out, stressText(Number(seed), Number(parts || 20000), Number(repeat || 90)));
} else if (mode === 'soup') {
  const [seed, out] = args;
  fs.writeFileSync(out, soupText(Number(seed)));
} else if (mode === 'classes') {
  const table = fs.readFileSync(args[0]);
  // in the order of TD_UC_* (src/data/bpe_internal.h), from 1; 0 is other
  const names = ['other', 'Lu', 'Ll', 'Lt', 'Lm', 'Lo', 'M', 'N', 'space'];
  const res = [/^\p{Lu}$/u, /^\p{Ll}$/u, /^\p{Lt}$/u, /^\p{Lm}$/u, /^\p{Lo}$/u, /^\p{M}$/u,
    /^\p{N}$/u, /^\s$/u];
  const classOf = (s) => res.findIndex((re) => re.test(s)) + 1;
  let bad = 0, first = -1;
  for (let cp = 0; cp < 0x110000; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue; // not in UTF-8 text
    if (table[cp] !== classOf(String.fromCodePoint(cp))) { if (first < 0) first = cp; bad++; }
  }
  if (bad) {
    console.log(`classes: ${bad} code points differ from node ${process.version} (Unicode ` +
                `${process.versions.unicode}); first U+${first.toString(16).toUpperCase()}: trident ` +
                `${names[table[first]]}, node ${names[classOf(String.fromCodePoint(first))]}`);
    process.exit(1);
  }
  console.log(`classes: all ${0x110000 - 0x800} code points agree with node ${process.version} ` +
              `(Unicode ${process.versions.unicode})`);
} else {
  console.error('usage: ref.cjs compare|bench|stress|soup|classes ...');
  process.exit(2);
}

// A text that exercises every branch of the three patterns and of the
// merge: letters of several scripts and of every letter category (case
// runs as in HTTPServer, title case such as U+01C5, modifier and other
// letters), combining marks, digits of several systems and long digit runs
// (cl100k and o200k split them in threes), runs of spaces, tabs, \r and \n
// (the \s*[\r\n]+ and \s+(?!\S) back-offs), contractions in both cases,
// in and out of place, punctuation before line breaks and '/', emoji
// (astral, ZWJ sequences), every code point U+0000..U+00FF, the whitespace
// JavaScript's \s has and lacks, long words (the heap merge) and the
// literal text of the special tokens. Seeded, so a failure reproduces.
function stressText(seed, count, repeat) {
  let x = seed >>> 0 || 1;
  const rnd = (n) => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x % n; };
  const pick = (a) => a[rnd(a.length)];
  const words = ['the', 'quick', 'brown', 'fox', 'Ünïcödé', 'naïve', 'œuvre', 'straße',
    'ΑΒΓ', 'λόγος', 'Москва', 'привет', 'שלום', 'مرحبا', 'नमस्ते', 'हिन्दी', '中文字符', '日本語',
    'カタカナ', '한국어', 'ภาษาไทย', 'ქართული', 'Ἀθῆναι', '𝐀𝐁𝐂', '𐌰𐌱𐌲', 'ǅemal', 'ﬁne',
    'HTTPServer', 'XMLHttpRequest', 'getHTTPResponseCode', 'iPhone', 'McDonald', 'HELLO', 'aBC',
    'ABCdef', 'ǈubljana', 'ǲ', 'ᾈᾉ', 'ǅǅ', 'ʰʲʷ', 'Aʰb', 'ǃǂ', 'ªº', 'cafe\u0301', 'A\u0301B\u0300c',
    '\u0301\u0302x', 'Z\u0324\u0308', 'क्षि', 'ক্ষ', 'ÀÉÎõü', 'ΣΑΣ', 'Ǆǅǆ', 'ﬀ', 'Ⓐⓑ', 'ⅰⅱ',
    'ABC\u0301', 'x\u20dd', '\u0903a'];
  const numbers = ['0', '42', '2026', '3.14159', '1,000,000', '٠١٢٣', '०१२३', '１２３', 'Ⅻ', '½', '²³',
    '𝟙𝟚', '1e10', '0x1F', '1234567', '00000000000', '١٢٣٤٥٦٧', '12٣4', '3141592653589793', '9²'];
  const symbols = ['!', '?', '...', '--', '—', '(', ')', '[', ']', '{', '}', '"', '«»', '@#$%', '^&*',
    '’', '‘', '“', '”', '\\', '/', '|', '~', '`', '<|endoftext|>', '<|', '|>', '🙂', '👍🏽',
    '👩‍💻', '🇫🇷', '❤️', '\u0301', 'e\u0301', '\u200d', '\u200b', '👨‍👩‍👧‍👦', '🏳️‍🌈',
    '<|endofprompt|>', '<|fim_prefix|>', '<|fim_middle|>', '<|fim_suffix|>', '/', '//',
    'http://a.b/c', '!\n', '?\r\n', '.\n\n', ').\n', '/\n', '!/', '.\r', ':/\n/']; 
  const contractions = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'x", "''",
    "n't", "I'm", "we'll", "they're", "it's", "'", "' s", "'ll", "'LL", "'lL", "'Ll", "'rE", "'Re",
    "'VE", "'vE", "'Ve", "'ve", "'M", "'D", "DON'T", "I'M", "Y'ALL'S", "JOHN'S", "ǅ'S", "x'Re"];
  const spaces = [' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', ' \n ', '\n   ', '\u00a0', '\u1680',
    '\u2000', '\u2009', '\u200a', '\u2028', '\u2029', '\u202f', '\u205f', '\u3000', '\ufeff',
    '\u0085', '\u180e', '\u000b', '\u000c', '      \n\n\t ', ' \r\n', '\r', '\r\r\n',
    '\n \n', '\t\n', ' \u3000\n', '\n\t', '  \n  '];
  const parts = [];
  for (let cp = 0; cp < 256; cp++) parts.push(String.fromCodePoint(cp)); // U+0000..U+00FF in order
  parts.push('\n');
  for (let cp = 0; cp < 256; cp++) parts.push(String.fromCodePoint(cp), pick([' ', '', 'a', '1', "'s"]));
  for (let k = 0; k < count; k++) {
    const r = rnd(100);
    if (r < 35) parts.push(pick(words));
    else if (r < 47) parts.push(pick(numbers));
    else if (r < 60) parts.push(pick(symbols));
    else if (r < 70) parts.push(pick(contractions));
    else if (r < 98) parts.push(pick(spaces));
    else if (r < 99) parts.push(String.fromCodePoint(rnd(256)));
    else parts.push(pick(words).repeat(1 + rnd(repeat))); // long words, over 256 bytes at times
  }
  parts.push('end', ' '.repeat(300), 'x'.repeat(1000), '!'.repeat(700), '  ');
  return parts.join('');
}

// Characters in random order, no words: every pair and triple of the
// patterns' edge cases meets (a title-case or modifier letter after an upper
// one, a mark after a prefix, an apostrophe between letters of either case,
// \r before \n and spaces, '/' after punctuation, digits of several
// systems), which a text of words rarely brings together. Cheap for the
// reference: its pieces are short.
function soupText(seed) {
  let x = (seed * 7919) >>> 0 || 1;
  const rnd = (n) => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x % n; };
  const alphabet = ['a', 'b', 's', 't', 'l', 'L', 'S', 'T', 'r', 'R', 'e', 'E', 'd', 'D', 'm', 'M',
    'v', 'V', 'B', 'H', 'Ǆ', 'ǅ', 'ǆ', 'ʰ', 'ˇ', '中', 'ก', '\u0301', '\u0903', '\u20dd', ' ', ' ',
    '  ', '\t', '\r', '\n', '\r\n', '\u3000', '\u00a0', '\u2028', "'", "'", '1', '2', '٣', '²',
    'Ⅻ', '!', '/', '.', '$', '\u200d', '👍', '🏽', '\ufeff', '\u0085', '_', '-', 'ﬁ'];
  const parts = [];
  for (let i = 0; i < 40000; i++) parts.push(alphabet[rnd(alphabet.length)]);
  return parts.join('');
}

// trident's int32 ids (idsFile) against the reference's for textFile; the
// first mismatch is printed and ends the run with status 1
function compareOne(enc, encName, textFile, idsFile) {
  const text = readText(textFile);
  const t0 = process.hrtime.bigint();
  const want = enc.encode(text, [], []);
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  const raw = fs.readFileSync(idsFile);
  const have = new Int32Array(raw.buffer, raw.byteOffset, raw.length / 4);
  let i = 0;
  while (i < want.length && i < have.length && want[i] === have[i]) i++;
  const name = `${path.basename(textFile)} (${encName})`;
  if (i === want.length && i === have.length) {
    // decode(encode(x)) == x on the reference side too
    if (enc.decode(want) !== text) { console.log(`${name}: the reference does not round-trip`); process.exit(1); }
    console.log(`${name}: ${text.length} UTF-16 units, ${want.length} tokens, token for token equal ` +
                `to js-tiktoken 1.0.21 (reference ${secs.toFixed(2)} s)`);
    return;
  }
  const show = (ids) => JSON.stringify(ids.map((t) => enc.decode([t])));
  const lo = Math.max(0, i - 3);
  const bytesBefore = Buffer.byteLength(enc.decode(want.slice(0, i)), 'utf8');
  console.log(`${name}: MISMATCH at token ${i} (byte offset ~${bytesBefore}): ` +
              `trident ${have.length} tokens, reference ${want.length}`);
  console.log(`  trident:   ${JSON.stringify(Array.from(have.slice(lo, i + 5)))} ${show(Array.from(have.slice(lo, i + 5)))}`);
  console.log(`  reference: ${JSON.stringify(want.slice(lo, i + 5))} ${show(want.slice(lo, i + 5))}`);
  process.exit(1);
}
