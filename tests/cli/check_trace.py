#!/usr/bin/python3
"""Checks a `trident train --trace` file (Chrome trace-event JSON).

Usage: check_trace.py FILE RANKS FORWARDS_PER_LANE [SERVERS]
Exits 1 naming the first problem found. Checks: the file parses; every event
has name, ph, ts, pid, tid; complete events ("X") have dur >= 0 and nest on
their lane (viewers drop slices that overlap without nesting); B/E pairs
balance per lane; async pairs ("b"/"e") match by (lane, id) with the end not
before the start; the lanes are exactly the ranks 0..RANKS-1, each named by a
thread_name metadata event; each lane has a compute event and a collective;
each lane has FORWARDS_PER_LANE forward events ("F mb k", compute). The
last SERVERS lanes (parameter servers, default 0) compute nothing: they
need a communication event (collective or p2p) and no forward.
Standard library only (json)."""
import json
import sys


def fail(msg):
    print("check_trace: FAIL: " + msg)
    sys.exit(1)


def ns(x):
    # timestamps are written in whole nanoseconds (3 decimals of us): exact
    return round(x * 1000)


def main():
    if len(sys.argv) not in (4, 5):
        fail("usage: check_trace.py FILE RANKS FORWARDS_PER_LANE [SERVERS]")
    path, ranks, forwards = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    servers = int(sys.argv[4]) if len(sys.argv) == 5 else 0
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s does not parse: %s" % (path, e))
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        fail("no traceEvents list at the top level")
    events = doc["traceEvents"]
    lanes = {}
    named = set()
    for i, e in enumerate(events):
        for k in ("name", "ph", "ts", "pid", "tid"):
            if k not in e:
                fail("event %d has no %r: %s" % (i, k, json.dumps(e)))
        if not isinstance(e["ts"], (int, float)) or not isinstance(e["tid"], int):
            fail("event %d: ts or tid is not a number: %s" % (i, json.dumps(e)))
        if e["pid"] != 0:
            fail("event %d: pid %r, want 0 (one process, a lane per rank)" % (i, e["pid"]))
        ph = e["ph"]
        if ph not in ("X", "B", "E", "b", "e", "M"):
            fail("event %d: unexpected ph %r" % (i, ph))
        if ph == "X" and (not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0):
            fail("event %d: complete event without a duration >= 0: %s" % (i, json.dumps(e)))
        if ph in ("b", "e") and "id" not in e:
            fail("event %d: async event without an id: %s" % (i, json.dumps(e)))
        if ph == "M":
            if e["name"] == "thread_name":
                named.add(e["tid"])
            continue
        lanes.setdefault(e["tid"], []).append(e)
    if sorted(lanes) != list(range(ranks)):
        fail("lanes %s, want the ranks 0..%d" % (sorted(lanes), ranks - 1))
    if named != set(lanes):
        fail("lanes without a thread_name: %s" % sorted(set(lanes) - named))

    for lane, evs in sorted(lanes.items()):
        # B/E: a stack per lane, in file order of equal timestamps
        depth = 0
        for e in sorted((e for e in evs if e["ph"] in "BE"), key=lambda e: ns(e["ts"])):
            depth += 1 if e["ph"] == "B" else -1
            if depth < 0:
                fail("lane %d: E without a B at ts %s" % (lane, e["ts"]))
        if depth:
            fail("lane %d: %d B events without an E" % (lane, depth))
        # async pairs
        open_ = {}
        for e in evs:
            if e["ph"] == "b":
                if e["id"] in open_:
                    fail("lane %d: async id %s begins twice" % (lane, e["id"]))
                open_[e["id"]] = e
        ended = set()
        for e in evs:
            if e["ph"] != "e":
                continue
            b = open_.get(e["id"])
            if b is None or e["id"] in ended:
                fail("lane %d: async end without its begin: %s" % (lane, json.dumps(e)))
            if ns(e["ts"]) < ns(b["ts"]) or e["name"] != b["name"]:
                fail("lane %d: async end does not match its begin: %s / %s"
                     % (lane, json.dumps(b), json.dumps(e)))
            ended.add(e["id"])
        if set(open_) != ended:
            fail("lane %d: %d async begins without an end" % (lane, len(set(open_) - ended)))
        # complete events nest: by start, longer first; each inside the
        # innermost open one or after it
        xs = sorted((e for e in evs if e["ph"] == "X"), key=lambda e: (ns(e["ts"]), -ns(e["dur"])))
        stack = []
        for e in xs:
            a, z = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
            while stack and stack[-1][1] <= a:
                stack.pop()
            if stack and z > stack[-1][1]:
                fail("lane %d: %r [%d, %d] ns overlaps %r [%d, %d] ns without nesting"
                     % (lane, e["name"], a, z, stack[-1][2], stack[-1][0], stack[-1][1]))
            stack.append((a, z, e["name"]))
        cats = {e.get("cat") for e in evs}
        server = lane >= ranks - servers
        for want in (("collective|p2p",) if server else ("compute", "collective")):
            if not cats & set(want.split("|")):
                fail("lane %d has no %s event (categories: %s)" % (lane, want, sorted(map(str, cats))))
        nf = sum(1 for e in evs if e["ph"] == "X" and e.get("cat") == "compute"
                 and e["name"].startswith("F "))
        if nf != (0 if server else forwards):
            fail("lane %d has %d forward events, want %d (steps x micro-batches%s)"
                 % (lane, nf, 0 if server else forwards, ", a server" if server else ""))
    n = sum(len(v) for v in lanes.values())
    print("check_trace: ok: %s: %d events on %d lanes, %d forwards each"
          % (path, n, len(lanes), forwards))


main()
