#!/usr/bin/env bash
# The monitors' files, judged by the Python tools DeepSpeed users read them with:
# monitor_format_writer writes known events through MonitorMaster twice (a run and its resumption);
# TensorBoard's EventAccumulator must read back every tag, step and value, torch's SummaryWriter
# given the same events must write the same bytes, and Python's csv module, writing the CSVs by
# DeepSpeed's csv_monitor rules, must write the same bytes and read ours back.
source "$(dirname "$0")/lib.sh"
WRITER=$ZT_BIN_DIR/tests/monitor_format_writer
install_pylib

for run in 0 1; do
  "$WRITER" "$WORK" $run \
    >"$WORK/writer$run.log" 2>&1 || fail "writer run $run: $(tail -5 "$WORK/writer$run.log")"
done

PYTHONPATH=$PYLIB /usr/bin/python3 - "$WORK" <<'PY' 2>&1 | grep -v "Warning: TensorFlow\|^  warnings.warn\|DeprecationWarning"
import csv, glob, json, math, os, re, socket, struct, sys

root = sys.argv[1]
runs = [json.loads(line) for line in open(os.path.join(root, "manifest.jsonl"))]
ok = True


def report(passed, what):
    global ok
    ok &= passed
    print(("ok: " if passed else "FAILED: ") + what)


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


def f32(x):
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


assert len(runs) == 2, runs
# The manifest's values are JSON numbers: "123" for 123.0, so floats are made floats again.
events = [(run["run"], e) for run in runs for call in run["calls"] for e in call]

# ---- TensorBoard: its own reader ----
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

log_dir = os.path.join(root, "tb", "job")
files = sorted(glob.glob(os.path.join(log_dir, "*")))
name = re.compile(r"events\.out\.tfevents\.\d{10}\.%s\.\d+\.\d+" % re.escape(socket.gethostname()))
report(files == sorted(run["event_file"] for run in runs) and all(name.fullmatch(os.path.basename(f)) for f in files),
       "one event file per run, under TensorBoard's name: " + ", ".join(map(os.path.basename, files)))

acc = EventAccumulator(log_dir, size_guidance={"scalars": 0})
acc.Reload()
want = {}
for _, e in events:
    want.setdefault(e["tag"], []).append((e["step"], f32(e["value"])))
got = {tag: [(s.step, s.value) for s in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
match = sorted(got) == sorted(want) and all(
    len(got[t]) == len(want[t]) and all(g[0] == w[0] and same(g[1], w[1]) for g, w in zip(got[t], want[t])) for t in want)
report(match and acc.file_version == 2.0,
       f"EventAccumulator reads every tag, step and float32 value ({sum(map(len, want.values()))} scalars, "
       f"{len(want)} tags, file_version {acc.file_version})")
if not match:
    print("  read:", got, "\n  wanted:", want)


def records(path):
    """Each record's bytes, both CRCs checked with TensorBoard's own masked_crc32c."""
    data, out, at = open(path, "rb").read(), [], 0
    while at < len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        assert struct.unpack_from("<I", data, at + 8)[0] == masked_crc32c(data[at:at + 8]), (path, at)
        body = data[at + 12:at + 12 + length]
        assert struct.unpack_from("<I", data, at + 12 + length)[0] == masked_crc32c(body), (path, at)
        out.append(data[at:at + 16 + length])
        at += 16 + length
    return out


# ---- TensorBoard: torch's SummaryWriter (what DeepSpeed uses) writes the same bytes ----
from torch.utils.tensorboard import SummaryWriter

for run in runs:
    ours = records(run["event_file"])
    wall = [event_pb2.Event.FromString(r[12:-4]).wall_time for r in ours[1:]]
    ref_dir = os.path.join(root, "torch", str(run["run"]))
    writer = SummaryWriter(log_dir=ref_dir)
    i = 0
    for call in run["calls"]:
        for e in call:
            writer.add_scalar(e["tag"], int(e["value"]) if e["as_int"] else float(e["value"]), e["step"], walltime=wall[i])
            i += 1
        writer.flush()
    writer.close()
    (ref_file,) = glob.glob(os.path.join(ref_dir, "events.out.tfevents.*"))
    theirs = records(ref_file)
    first, ref_first = (event_pb2.Event.FromString(r[0][12:-4]) for r in (ours, theirs))
    report(ours[1:] == theirs[1:] and len(ours) == len(theirs),
           f"run {run['run']}: our {len(ours) - 1} scalar records are byte for byte SummaryWriter.add_scalar's")
    report(first.file_version == ref_first.file_version == "brain.Event:2" and first.step == ref_first.step == 0
           and first.source_metadata.writer == "zerotrain" and not first.HasField("summary"),
           f"run {run['run']}: first event: file_version {first.file_version!r}, writer {first.source_metadata.writer!r} "
           f"(SummaryWriter's: {ref_first.source_metadata.writer!r})")

# ---- CSV: Python's csv module, following DeepSpeed's csv_monitor rules ----
csv_dir = os.path.join(root, "csv", "job")
ref_dir = os.path.join(root, "csv_reference")
os.makedirs(ref_dir)
for run in runs:
    headed = set()  # a new process writes each file's header again
    for call in run["calls"]:
        for e in call:
            base = e["tag"].replace("/", "_").replace(" ", "_")
            with open(os.path.join(ref_dir, base + ".csv"), "a+") as f:
                w = csv.writer(f)
                if base not in headed:
                    headed.add(base)
                    w.writerow(["step", e["tag"].split("/")[-1]])
                w.writerow([e["step"], int(e["value"]) if e["as_int"] else float(e["value"])])
names = sorted(os.listdir(csv_dir))
identical = names == sorted(os.listdir(ref_dir)) and all(
    open(os.path.join(csv_dir, n), "rb").read() == open(os.path.join(ref_dir, n), "rb").read() for n in names)
report(identical, "CSV files byte for byte as Python's csv module writes them: " + ", ".join(names))
if not identical:
    for n in names:
        print(" ", n, open(os.path.join(csv_dir, n), "rb").read())
read_back = True
for tag in want:
    base = tag.replace("/", "_").replace(" ", "_")
    with open(os.path.join(csv_dir, base + ".csv"), newline="") as f:
        rows = list(csv.reader(f))
    header = ["step", tag.split("/")[-1]]
    data = [r for r in rows if r != header]
    expect = [(e["step"], e["value"]) for _, e in events if e["tag"] == tag]
    read_back &= rows[0] == header and rows.count(header) == len(runs) and len(data) == len(expect) and all(
        int(r[0]) == s and same(float(r[1]), v) for r, (s, v) in zip(data, expect))
report(read_back, "csv.reader reads back every step and value (one header row per run)")
sys.exit(0 if ok else 1)
PY
[[ ${PIPESTATUS[0]} -eq 0 ]] && pass "monitor files as TensorBoard, torch and Python's csv read and write them" \
  || fail "monitor file format"

# check_monitors.py (the trainer's integration tests call it) on files our writer wrote for a
# made-up fp16 run of 10 steps and its resumption from step 6 to 12, with events on DeepSpeed's
# schedule and a metrics.jsonl that logs every 2nd step; it must pass, and fail when they disagree.
T=$WORK/trainer
mkdir -p "$T"
/usr/bin/python3 - "$T" <<'PY' || fail "making the made-up run"
import json, random, sys
root, n, rng = sys.argv[1], 8, random.Random(3)
metrics, runs = [], []
for first, last in ((1, 10), (7, 12)):
    metrics.append({"event": "start", "train_batch_size": n, "dtype": "fp16"})
    calls, scale = [], 2 ** 16
    for k in range(first, last + 1):
        loss, lr = rng.uniform(2, 11), 1e-3 * min(1.0, k / 5)
        calls.append([["Train/Samples/train_loss", loss, (k - 1) * n, False]])  # in backward
        if k == 4:
            scale = scale / 2.0  # from here on a float, as DeepSpeed's
        calls.append([["Train/Samples/lr", lr, k * n, False], ["Train/Samples/loss_scale", scale, k * n, type(scale) is int]])
        if k % 2 == 0 or k == last:
            metrics.append({"event": "step", "step": k, "loss": loss, "lr": lr, "loss_scale": scale})
        if k % 4 == 0:
            e = rng.uniform(2, 11)
            metrics.append({"event": "eval", "step": k, "eval_loss": e})
            calls.append([["Train/Samples/eval_loss", e, k * n, False]])
    runs.append(calls)
with open(f"{root}/metrics.jsonl", "w") as f:
    f.writelines(json.dumps(m) + "\n" for m in metrics)
next(m for m in metrics if m["event"] == "step" and m["step"] == 4)["lr"] *= 1.001  # not redone by run 2
with open(f"{root}/metrics_tampered.jsonl", "w") as f:
    f.writelines(json.dumps(m) + "\n" for m in metrics)
for i, calls in enumerate(runs):
    with open(f"{root}/events{i}.jsonl", "w") as f:
        f.writelines(json.dumps(c) + "\n" for c in calls)
PY
for run in 0 1; do
  "$WRITER" "$T" $run "$T/events$run.jsonl" >"$T/writer$run.log" 2>&1 || fail "made-up run $run: $(tail -5 "$T/writer$run.log")"
done
CHECK=("$ZT_SOURCE_DIR/tests/integration/check_monitors.py" --tensorboard "$T/tb/job" --csv "$T/csv/job")
if PYTHONPATH=$PYLIB /usr/bin/python3 "${CHECK[@]}" "$T/metrics.jsonl" >"$T/check.log" 2>&1; then
  pass "check_monitors.py accepts a run and its resumption written on DeepSpeed's schedule"
else
  fail "check_monitors.py on the made-up run: $(grep -v '^ok' "$T/check.log")"
fi
for wrong in "--loss_index after" "--runs 1" "--fp16 no" "--tampered"; do
  metrics=$T/metrics.jsonl
  [[ $wrong == --tampered ]] && { metrics=$T/metrics_tampered.jsonl; wrong=""; }
  # shellcheck disable=SC2086
  if PYTHONPATH=$PYLIB /usr/bin/python3 "${CHECK[@]}" "$metrics" $wrong >"$T/wrong.log" 2>&1; then
    fail "check_monitors.py passed what disagrees (${wrong:-lr changed in metrics.jsonl})"
  else
    pass "check_monitors.py fails when files and metrics disagree (${wrong:-lr changed in metrics.jsonl})"
  fi
done
finish
