#!/usr/bin/env bash
# Draws a `trident train --trace` file as a PNG: one horizontal lane per
# rank, a box per event coloured by kind (forward, backward, weight-grad,
# p2p, collective, optimizer, data, eval), x = time in ms. Events on the
# rank's thread fill the upper band of its lane, nested ones (a blocking
# collective inside a forward) drawn narrower on top, forward / backward /
# weight boxes wide enough labelled F3, B3, W3 (micro-batch 3; B3.1: chunk
# 1), so a pipeline's schedule reads off the picture; nonblocking
# communication, which overlaps them, runs in the thin band below.
# Usage: render_trace.sh TRACE.json OUT.png
# Needs gnuplot (scripts/deps.sh installs gnuplot-nox) and python3 (stdlib).
set -euo pipefail
trace=${1:?usage: render_trace.sh TRACE.json OUT.png}
out=${2:?usage: render_trace.sh TRACE.json OUT.png}
[ -r "$trace" ] || { echo "render_trace: cannot read $trace" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "render_trace: gnuplot missing; apt-get install -y gnuplot-nox (or run scripts/deps.sh)" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# JSON -> one data file per kind (x_mid y x0 x1 y0 y1, in ms and lanes) and
# the gnuplot settings that depend on the trace (lanes, their names)
/usr/bin/python3 - "$trace" "$tmp" <<'PY'
import json, sys
trace, tmp = sys.argv[1], sys.argv[2]
ev = json.load(open(trace, encoding="utf-8"))["traceEvents"]
names, spans = {}, {}  # lane -> name; lane -> [(t0, t1, name, cat, async)]
begins = {}
for e in ev:
    ph, lane = e.get("ph"), e.get("tid", 0)
    if ph == "M" and e.get("name") == "thread_name":
        names[lane] = e.get("args", {}).get("name", "rank %d" % lane)
    elif ph == "X":
        spans.setdefault(lane, []).append((e["ts"], e["ts"] + e["dur"], e["name"], e.get("cat", ""), 0))
    elif ph == "b":
        begins[(lane, e["id"])] = e
    elif ph == "e" and (lane, e["id"]) in begins:
        b = begins.pop((lane, e["id"]))
        spans.setdefault(lane, []).append((b["ts"], e["ts"], b["name"], b.get("cat", ""), 1))
if not spans:
    sys.exit("render_trace: no events in " + trace)
t_min = min(s[0] for v in spans.values() for s in v)

def kind(name, cat):
    if cat == "compute":
        return {"F": "forward", "B": "backward", "W": "weight-grad"}.get(name[:1], "compute")
    return cat if cat in ("p2p", "collective", "optimizer", "data", "eval") else "other"

rows, labels = {}, []
lanes = sorted(set(spans) | set(names))
t_max = max(s[1] for v in spans.values() for s in v)
min_w = (t_max - t_min) / 1e3 / 120  # ms: boxes wide enough for a label

def short(name):
    # "F mb 3" -> F3, "B mb 3 chunk 1" -> B3.1: the schedule's notation
    p = name.split()
    if len(p) >= 3 and p[1] == "mb":
        return p[0] + p[2] + ("." + p[4] if len(p) >= 5 and p[3] == "chunk" else "")
    return None
for lane in lanes:
    # depth of each complete event: how many enclose it
    stack = []
    for t0, t1, name, cat, asyn in sorted(spans.get(lane, []), key=lambda s: (s[4], s[0], -s[1])):
        x0, x1 = (t0 - t_min) / 1e3, (t1 - t_min) / 1e3
        if asyn:
            y0, y1 = lane + 0.22, lane + 0.40
        else:
            while stack and stack[-1] <= t0:
                stack.pop()
            d = min(len(stack), 3)
            stack.append(t1)
            y0, y1 = lane - 0.40 + 0.09 * d, lane + 0.15 - 0.09 * d
            lab = short(name) if cat == "compute" and d == 0 else None
            if lab and x1 - x0 >= min_w:
                labels.append('set label "%s" at %.6f,%.3f center front font ",8" tc rgb "white"'
                              % (lab, (x0 + x1) / 2, lane - 0.32))
        rows.setdefault(kind(name, cat), []).append("%.6f %d %.6f %.6f %.3f %.3f" % ((x0 + x1) / 2, lane, x0, x1, y0, y1))
for k, r in rows.items():
    open("%s/%s.dat" % (tmp, k), "w").write("\n".join(r) + "\n")
tics = ", ".join('"%s" %d' % (names.get(l, "rank %d" % l).replace('"', "'"), l) for l in lanes)
with open(tmp + "/settings.gp", "w") as f:
    f.write("set ytics (%s)\n" % tics)
    f.write("set yrange [%f:%f]\n" % (max(lanes) + 0.6, min(lanes) - 0.6))  # rank 0 on top
    f.write("lanes = %d\n" % len(lanes))
    f.write("\n".join(labels) + "\n")
PY

# kinds in drawing order: enclosing work first, what nests in it on top
plots=()
for k in data:#9e9e9e eval:#8d6e63 forward:#1e88e5 backward:#43a047 weight-grad:#00897b \
         compute:#5c6bc0 optimizer:#fb8c00 collective:#e53935 p2p:#8e24aa other:#212121; do
  name=${k%%:*} colour=${k#*:}
  [ -s "$tmp/$name.dat" ] && plots+=("'$tmp/$name.dat' using 1:2:3:4:5:6 with boxxyerror fs solid 0.9 noborder lc rgb '$colour' title '$name'")
done
joined=$(IFS=,; echo "${plots[*]}")
lanes=$(sed -n 's/^lanes = //p' "$tmp/settings.gp")
gnuplot <<GP
set terminal pngcairo size 1400,$((160 + 70 * lanes)) noenhanced font ',10'
set output '$out'
load '$tmp/settings.gp'
set xlabel 'time (ms)'
set title 'trident trace: $(basename "$trace")  (upper band: the rank thread, nested calls narrower; lower band: nonblocking communication)'
set key outside top center horizontal
set grid xtics
set offsets 0, 0, 0, 0
$(echo "plot $joined")
GP
echo "render_trace: wrote $out"
