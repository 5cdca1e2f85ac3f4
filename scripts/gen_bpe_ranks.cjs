// Byte-level BPE ranks of one of js-tiktoken's encodings (gpt2, cl100k_base,
// o200k_base), from the npm package (MIT), into trident's compact binary rank
// file (format: include/trident/formats_bpe.h). The conversion is done once
// and the results committed as data/gpt2.bpe, data/cl100k.bpe and
// data/o200k.bpe, so a build needs no registry; `check` re-derives a file
// from the installed package and compares byte for byte (the test
// bpe_ranks_file runs that for all three).
//   node gen_bpe_ranks.cjs write ENCODING PKG_DIR OUT
//   node gen_bpe_ranks.cjs check ENCODING PKG_DIR FILE
// PKG_DIR holds node_modules/js-tiktoken (scripts/js_tiktoken.sh dir).
'use strict';
const fs = require('fs');
const path = require('path');
const [mode, encoding, pkgDir, file] = process.argv.slice(2);
const encodings = ['gpt2', 'cl100k_base', 'o200k_base'];
if (!['write', 'check'].includes(mode) || !encodings.includes(encoding) || !pkgDir || !file) {
  console.error(`usage: gen_bpe_ranks.cjs write|check ${encodings.join('|')} PKG_DIR FILE`);
  process.exit(2);
}
const mod = path.join(pkgDir, 'node_modules', 'js-tiktoken');
const version = require(path.join(mod, 'package.json')).version;
const g = require(path.join(mod, 'dist', 'ranks', `${encoding}.cjs`));
const enc = g.default || g;

// js-tiktoken's own reading of its compressed ranks ("! OFFSET b64 b64 ...":
// consecutive ranks from OFFSET), as in its Tiktoken constructor
const ranks = [];
for (const line of enc.bpe_ranks.split('\n').filter(Boolean)) {
  const [, off, ...toks] = line.split(' ');
  toks.forEach((t, i) => { ranks[parseInt(off, 10) + i] = Buffer.from(t, 'base64'); });
}
for (let i = 0; i < ranks.length; i++) if (!ranks[i]) throw new Error(`rank ${i} missing`);
const specials = Object.entries(enc.special_tokens).map(([text, id]) => [id, Buffer.from(text, 'utf8')]);
specials.sort((a, b) => a[0] - b[0]);
// gpt2 states its vocabulary; the others leave ids unused between their
// last rank and their specials (cl100k: 100261..100275), so check order only
if (enc.explicit_n_vocab !== undefined && enc.explicit_n_vocab !== ranks.length + specials.length)
  throw new Error('vocabulary size');
if (specials[0][0] < ranks.length) throw new Error('a special token id among the ranks');

const lengths = Buffer.from(ranks.map((b) => {
  if (b.length < 1 || b.length > 255) throw new Error('token length');
  return b.length;
}));
const data = Buffer.concat(ranks);
const spec = Buffer.concat(specials.map(([id, text]) => {
  const h = Buffer.alloc(5);
  h.writeUInt32LE(id, 0);
  h.writeUInt8(text.length, 4);
  return Buffer.concat([h, text]);
}));
const payload = Buffer.concat([lengths, data, spec]);
// XXH3-64 (seed 0) over everything after the header, the checksum of
// trident's other files (src/formats/hash.c). Node has no XXH3 of its own,
// so Debian's python3-xxhash computes it (the tests' independent checksum
// reader, tests/cli/ckpt_xxh3.py, uses the same module; scripts/deps.sh
// installs it); PYTHON overrides /usr/bin/python3.
const { execFileSync } = require('child_process');
const hex = execFileSync(process.env.PYTHON || '/usr/bin/python3',
  ['-c', 'import sys, xxhash; print(xxhash.xxh3_64_hexdigest(sys.stdin.buffer.read()))'],
  { input: payload }).toString().trim();
if (!/^[0-9a-f]{16}$/.test(hex)) throw new Error(`xxh3 gave '${hex}'`);
const hash = BigInt('0x' + hex);
const head = Buffer.alloc(32);
head.write('TRIDBPE1', 0, 'latin1');
head.writeUInt32LE(ranks.length, 8);
head.writeUInt32LE(specials.length, 12);
head.writeUInt32LE(data.length, 16);
head.writeUInt32LE(0, 20);
head.writeBigUInt64LE(hash, 24);
const out = Buffer.concat([head, payload]);

if (mode === 'write') {
  fs.writeFileSync(file, out);
  console.log(`${file}: ${ranks.length} ranks + ${specials.length} special from js-tiktoken ${version}, ${out.length} bytes`);
} else {
  const have = fs.readFileSync(file);
  if (have.equals(out)) {
    console.log(`${file}: equal to js-tiktoken ${version}'s ${encoding} ranks (${ranks.length} ranks, ` +
                `${specials.map(([id, t]) => `${t} = ${id}`).join(', ')}; ${out.length} bytes)`);
    process.exit(0);
  }
  let i = 0;
  while (i < have.length && i < out.length && have[i] === out[i]) i++;
  console.error(`${file}: differs from js-tiktoken ${version}'s ${encoding} ranks at byte ${i} ` +
                `(${have.length} bytes, the package gives ${out.length}); regenerate with ` +
                `node scripts/gen_bpe_ranks.cjs write ${encoding} PKG_DIR ${file}`);
  process.exit(1);
}
