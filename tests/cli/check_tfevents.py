#!/usr/bin/python3
"""Reads a TensorBoard event file written by `trident train --tensorboard`
and checks it against the same run's --log, independently of trident's C:

- CRC32C is computed here (table of the reflected Castagnoli polynomial),
  first against its known answer CRC32C("123456789") = 0xE3069283;
- every TFRecord's length and data carry the masked CRC32C of their bytes,
  and the records end exactly at the end of the file;
- every record parses as an Event of TensorBoard's published schema
  (tensorboard/compat/proto/event.proto and summary.proto, the fields
  trident uses, with their published numbers), compiled here by protoc and
  read with Debian's python3-protobuf, and is byte for byte what protobuf
  serializes for the message it parsed (no unknown field);
- the first event is file_version "brain.Event:2"; with --start S the second
  is SessionLog START at step S, and no other event is a SessionLog;
- each step's scalars are the --log line's values: exactly (as float32)
  where the log prints the number in full, within the log's rounding where
  it prints fewer digits; the tags are exactly those the run has (loss
  scale with fp16, moe/* with experts), steps are the log's steps, and
  eval/val_loss, mem/*_peak (the busiest rank's) and mem/rss_peak are the
  log's too.

Usage: check_tfevents.py FILE LOG [--start S]   (exit 0: all checks passed)
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

EVENT_PROTO = """
syntax = "proto3";
package tensorboard;
import "summary.proto";
message SessionLog {
  enum SessionStatus { STATUS_UNSPECIFIED = 0; START = 1; STOP = 2; CHECKPOINT = 3; }
  SessionStatus status = 1;
  string checkpoint_path = 2;
  string msg = 3;
}
message Event {
  double wall_time = 1;
  int64 step = 2;
  oneof what {
    string file_version = 3;
    bytes graph_def = 4;
    Summary summary = 5;
    bytes log_message = 6;  // LogMessage in the schema (deprecated); not read here
    SessionLog session_log = 7;
    bytes tagged_run_metadata = 8;
    bytes meta_graph_def = 9;
  }
}
"""
SUMMARY_PROTO = """
syntax = "proto3";
package tensorboard;
message Summary {
  message Value {
    string node_name = 7;
    string tag = 1;
    oneof value {
      float simple_value = 2;
      bytes obsolete_old_style_histogram = 3;
    }
  }
  repeated Value value = 1;
}
"""


def crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


TABLE = crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def compile_protos():
    d = tempfile.mkdtemp()
    for name, text in (("event.proto", EVENT_PROTO), ("summary.proto", SUMMARY_PROTO)):
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    subprocess.run(["protoc", "-I" + d, "--python_out=" + d, "event.proto", "summary.proto"], check=True)
    sys.path.insert(0, d)
    import event_pb2  # noqa: E402

    return event_pb2


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def ulp32(x):
    x = abs(f32(x))
    if x == 0:
        return 1.4e-45
    m, e = math.frexp(x)
    return math.ldexp(1.0, e - 24)


fails = []


def fail(msg):
    fails.append(msg)
    print("FAIL " + msg)


def read_records(path):
    raw = open(path, "rb").read()
    out, off = [], 0
    while off < len(raw):
        if off + 12 > len(raw):
            fail("%s: %d stray bytes at the end" % (path, len(raw) - off))
            break
        head = raw[off:off + 8]
        (n,) = struct.unpack("<Q", head)
        (lc,) = struct.unpack("<I", raw[off + 8:off + 12])
        if lc != masked(head):
            fail("record at %d: length CRC %08x, want %08x" % (off, lc, masked(head)))
            break
        data = raw[off + 12:off + 12 + n]
        if len(data) != n or off + 16 + n > len(raw):
            fail("record at %d: %d data bytes promised, the file ends first" % (off, n))
            break
        (dc,) = struct.unpack("<I", raw[off + 12 + n:off + 16 + n])
        if dc != masked(data):
            fail("record at %d: data CRC %08x, want %08x" % (off, dc, masked(data)))
        out.append(data)
        off += 16 + n
    return out


def main():
    args = sys.argv[1:]
    start = None
    if "--start" in args:
        i = args.index("--start")
        start = int(args[i + 1])
        del args[i:i + 2]
    path, log = args
    if crc32c(b"123456789") != 0xE3069283:
        fail("CRC32C('123456789') = %08x, want e3069283" % crc32c(b"123456789"))
    pb = compile_protos()
    events = []
    for data in read_records(path):
        e = pb.Event()
        e.ParseFromString(data)
        # protobuf's own bytes for what it parsed: no field it does not know,
        # nothing written twice or out of its canonical form
        if e.SerializeToString() != data:
            fail("event %d: %s is not protobuf's serialization of what it holds (%s)" %
                 (len(events), data.hex(), e.SerializeToString().hex()))
        events.append(e)
    if not events or events[0].WhichOneof("what") != "file_version" or events[0].file_version != "brain.Event:2":
        fail("the first event is not file_version brain.Event:2")
    starts = [e for e in events if e.WhichOneof("what") == "session_log"]
    if start is None and starts:
        fail("a SessionLog in a run that did not resume")
    if start is not None:
        if len(events) < 2 or events[1].WhichOneof("what") != "session_log":
            fail("the second event is not a SessionLog")
        elif events[1].session_log.status != pb.SessionLog.START or events[1].step != start:
            fail("SessionLog status %d at step %d, want START at %d" % (events[1].session_log.status, events[1].step, start))
        if len(starts) != 1:
            fail("%d SessionLogs, want 1" % len(starts))
    walls = [e.wall_time for e in events]
    if walls != sorted(walls) or walls[0] < 1.7e9:
        fail("wall times not increasing from now: %s" % walls[:3])
    # the file's scalars: step -> tag -> its values in order (a step skipped
    # by loss scaling and trained again writes its count, then the step)
    tb = {}
    for e in events:
        if e.WhichOneof("what") != "summary":
            continue
        for v in e.summary.value:
            if v.WhichOneof("value") != "simple_value":
                fail("step %d: %s is not a simple_value" % (e.step, v.tag))
            tb.setdefault(e.step, {}).setdefault(v.tag, []).append(v.simple_value)
    # the log's values, with the half-unit of the digits it prints (0: in full)
    want = {}
    last = None
    steps = 0
    for line in open(log):
        o = json.loads(line)
        if "loss" in o and "step" in o:
            steps += 1
            s = o["step"]
            last = s
            w = want.setdefault(s, {})
            if "train/loss" in w:
                fail("the log has step %d twice" % s)
            w["train/loss"] = (o["loss"], "float")
            w["train/lr"] = (o["lr"], "float")
            w["train/grad_norm"] = (o["grad_norm"], "double")
            w["perf/step_ms"] = (o["step_ms"], 0.0005)
            w["perf/tokens_per_s"] = (o["tokens_per_s"], 0.05)
            w["perf/mfu"] = (o["mfu"], 0.00005)
            if "loss_scale" in o:
                w["train/loss_scale"] = (o["loss_scale"], "float")
            if "moe_aux" in o:
                w["moe/aux"] = (o["moe_aux"], "double")
                w["moe/z"] = (o["moe_z"], "double")
                w["moe/load_min"] = (o["moe_load_min"], 0.00005)
                w["moe/load_max"] = (o["moe_load_max"], 0.00005)
                w["moe/dropped"] = (o["moe_dropped"], 0.0000005)
        elif o.get("event") == "skip":
            want.setdefault(o["step"], {})["train/skipped_steps"] = (o["skipped"], "float")
        elif "val_loss" in o:
            want.setdefault(o["step"], {})["eval/val_loss"] = (o["val_loss"], 0.0000005)
        elif o.get("event") == "memory":
            for k in o["ranks"][0]:
                # per category; the device/host split ("device_peak": {...})
                # is --log's only
                if k.endswith("_peak") and not isinstance(o["ranks"][0][k], dict):
                    want.setdefault(last, {})["mem/" + k] = (max(r[k] for r in o["ranks"]), "float")
        elif o.get("event") == "rss":
            want.setdefault(last, {})["mem/rss_peak"] = (max(r["rss_peak"] for r in o["ranks"]), "float")
    if steps == 0:
        fail("the log has no step line")
    if sorted(tb) != sorted(want):
        fail("steps %s in the file, %s in the log" % (sorted(tb), sorted(want)))
    checked = 0
    for s in sorted(want):
        got = tb.get(s, {})
        if sorted(got) != sorted(want[s]):
            fail("step %d: tags %s, want %s" % (s, sorted(got), sorted(want[s])))
        for tag, (v, how) in want[s].items():
            if tag not in got:
                continue
            if len(got[tag]) != 1:
                fail("step %d: %s written %d times" % (s, tag, len(got[tag])))
            g = got[tag][0]
            ok = (g == f32(v) if how == "float"
                  else abs(g - f32(v)) <= ulp32(v) if how == "double"
                  else abs(g - v) <= how + ulp32(v))
            checked += 1
            if not ok:
                fail("step %d: %s = %r in the file, %r in the log" % (s, tag, g, v))
    print("%s: %d records, %d steps, %d values checked against the log%s" %
          (os.path.basename(path), len(events), steps, checked,
           "" if start is None else ", SessionLog START at step %d" % start))
    sys.exit(1 if fails else 0)


main()
