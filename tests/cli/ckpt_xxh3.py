"""An independent reader of trident's checkpoint integrity fields, written
from the format's description (include/trident/formats_manifest.h) with
Python's json and struct and python3-xxhash (Debian's binding of the
reference xxHash), sharing no code with trident.

  ckpt_xxh3.py verify STEP_DIR   recompute every recorded checksum: the
                                 manifest's seal, each shard's size and header
                                 checksum, every 4 MiB block of every piece
  ckpt_xxh3.py same A B          A and B hold the same state: every tensor's
                                 bytes and the manifest's fields, except what
                                 names the run (run id, header checksums, seal)
  ckpt_xxh3.py reseal STEP_DIR   after a test edited a shard or the manifest:
                                 recompute every checksum the way trident
                                 writes them, so that the edit reaches the
                                 checks behind them (values, keys, coverage)
Exit 0 when all holds; otherwise one line per difference and exit 1."""
import json, struct, sys
import xxhash

SEAL_KEY = b'"manifest_xxh3": '


def h64(b):
    return xxhash.xxh3_64_hexdigest(bytes(b))


def read_shard(path):
    b = open(path, "rb").read()
    n = struct.unpack_from("<Q", b, 0)[0]
    hdr = json.loads(b[8:8 + n])
    meta = hdr.pop("__metadata__", {})
    return b, n, hdr, meta


def sealed_prefix(text):
    i = text.rindex(SEAL_KEY) + len(SEAL_KEY)
    return text[:i]


def verify(d):
    bad = []
    text = open(d + "/manifest.json", "rb").read()
    m = json.loads(text)
    if h64(sealed_prefix(text)) != m["manifest_xxh3"]:
        bad.append("manifest.json: its seal does not match its text")
    for f in m["files"]:
        b, n, hdr, meta = read_shard(d + "/" + f["name"])
        if len(b) != f["size"]:
            bad.append("%s: %d bytes, the manifest records %d" % (f["name"], len(b), f["size"]))
        if h64(b[:8 + n]) != f["header_xxh3"]:
            bad.append("%s: header checksum differs" % f["name"])
        if meta.get("trident_run") != m["run"] or int(meta.get("trident_step", -1)) != m["step"]:
            bad.append("%s: run/step %s/%s, manifest %s/%d" % (f["name"], meta.get("trident_run"),
                                                               meta.get("trident_step"), m["run"], m["step"]))
        block = int(meta["trident_xxh3_block"])
        for k, v in hdr.items():
            s, e = v["data_offsets"]
            data = b[8 + n + s:8 + n + e]
            sums = ",".join(h64(data[o:o + block]) for o in range(0, len(data), block))
            if sums != meta.get("xxh3/" + k):
                bad.append("%s: %s: block checksums differ" % (f["name"], k))
    return bad


def tensors(d):
    m = json.loads(open(d + "/manifest.json", "rb").read())
    out = {}
    for f in m["files"]:
        b, n, hdr, meta = read_shard(d + "/" + f["name"])
        for k, v in hdr.items():
            s, e = v["data_offsets"]
            out[(f["name"], k)] = b[8 + n + s:8 + n + e]
    return m, out


def same(a, b):
    ma, ta = tensors(a)
    mb, tb = tensors(b)
    bad = []
    if sorted(ta) != sorted(tb):
        bad.append("the shards hold different tensors")
    bad += ["%s %s: the bytes differ" % k for k in sorted(set(ta) & set(tb)) if ta[k] != tb[k]]
    for m in (ma, mb):  # what names the run, and checksums covering it
        for k in ("run", "manifest_xxh3", "run_config"):
            m.pop(k, None)
        for f in m["files"]:
            f.pop("header_xxh3", None)
    if ma != mb:
        bad.append("the manifests differ beyond the run's id")
    return bad


def reseal(d):
    text = open(d + "/manifest.json", "rb").read()
    m = json.loads(text)
    files = {}
    for f in m["files"]:
        p = d + "/" + f["name"]
        try:
            b, n, hdr, meta = read_shard(p)
        except (OSError, ValueError):
            continue  # a shard the test removed or broke on purpose
        block = int(meta.get("trident_xxh3_block", 4 << 20))
        for k, v in hdr.items():
            s, e = v["data_offsets"]
            data = b[8 + n + s:8 + n + e]
            meta["xxh3/" + k] = ",".join(h64(data[o:o + block]) for o in range(0, len(data), block))
        hdr["__metadata__"] = meta
        h = json.dumps(hdr, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)
        nb = struct.pack("<Q", len(h)) + h + b[8 + n:]
        open(p, "wb").write(nb)
        files[f["name"]] = (len(nb), h64(nb[:8 + len(h)]))
    # the text as edited, with the file entries and the seal brought up to date
    for f in m["files"]:
        if f["name"] in files:
            f["size"], f["header_xxh3"] = files[f["name"]]
    m.pop("manifest_xxh3", None)
    body = json.dumps(m, indent=1).encode()
    assert body.endswith(b"}")
    pre = body[:-1].rstrip() + b",\n " + SEAL_KEY
    open(d + "/manifest.json", "wb").write(pre + b'"' + h64(pre).encode() + b'"}\n')
    return []


if __name__ == "__main__":
    cmd = sys.argv[1]
    bad = {"verify": lambda: verify(sys.argv[2]), "same": lambda: same(sys.argv[2], sys.argv[3]),
           "reseal": lambda: reseal(sys.argv[2])}[cmd]()
    for line in bad:
        print("ckpt_xxh3 %s: %s" % (cmd, line))
    sys.exit(1 if bad else 0)
