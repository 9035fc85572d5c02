#!/usr/bin/env python3
"""Checks what DeepSpeed's monitors (as zerotrain writes them) hold against OUTPUT/metrics.jsonl.

Usage (run with PYTHONPATH=$ZT_BIN_DIR/pylib, where tests/requirements.txt installs tensorboard):

    check_monitors.py METRICS_JSONL [--tensorboard LOG_DIR] [--csv LOG_DIR] [options]

  METRICS_JSONL        the run's OUTPUT/metrics.jsonl (a resumed run's lines appended to it)
  --tensorboard DIR    the tensorboard block's log dir, output_path/job_name; read with
                       TensorBoard's own EventAccumulator
  --csv DIR            the csv_monitor block's log dir, output_path/job_name; read with csv
  --runs N             how many runs wrote there (default: the "start" events in METRICS_JSONL):
                       one event file per run, at most one header row per run in each CSV, so
                       a file from a rank other than 0 fails the check
  --train_batch_size N samples per step (default: the "start" events' train_batch_size)
  --loss_index before|after
                       the index of Train/Samples/train_loss for step k: (k-1)*N "before" (the
                       default: DeepSpeed's engine writes it in backward, before the step adds N
                       to global_samples) or k*N "after" (DeepSpeed's pipeline engine)
  --loss_key KEY       the "step" events' field the train loss is compared with (default "loss")
  --lr_key KEY         the field Train/Samples/lr (index k*N) is compared with (default "lr")
  --scheduled used|next
                       whose lr and loss_scale are written at k*N: step k's (used, the default) or
                       step k+1's (next: DeepSpeed's engine logs them after the scheduler's step
                       and the scale's update, and so does zerotrain); with next, the last step
                       in METRICS_JSONL has no expected value, only its index is checked
  --fp16 auto|yes|no   whether Train/Samples/loss_scale (index k*N, field "loss_scale") must be
                       there; auto (default): when the "start" event's dtype is fp16
  --eval_tag TAG       the eval loss's tag (default Train/Samples/eval_loss, DeepSpeed's pipeline
                       engine's), index k*N for an "eval" event at step k, field "eval_loss"

What is checked, for each monitor given:
  - the tags are exactly train_loss, lr, loss_scale (fp16), the eval tag (when METRICS_JSONL has
    eval events); DeepSpeed's wall_clock_breakdown tags (Train/Samples/elapsed_time_ms_*) are
    allowed besides;
  - every "step" and "eval" event of METRICS_JSONL has its value at its index (the last value
    written for an index wins, as a resumed run repeats steps after its checkpoint); TensorBoard
    values are float32 (simple_value), so they must equal the float32 rounding of the expected
    value; CSV values must read back as the expected double or its float32 rounding (DeepSpeed
    logs a float32 loss tensor's item()), written as Python writes a float or an int;
  - lr holds exactly the steps 1..last (times N), nothing more: monitors write every step while
    metrics.jsonl may log every logging_steps;
  - event files are named events.out.tfevents.<10 digits>.<host>.<pid>.<n> and start with
    file_version "brain.Event:2"; CSVs are named after their tags, with "step,<last tag part>"
    header rows.
Prints one "ok:"/"FAILED:" line per check, exits 1 on any failure, 2 on bad arguments.
"""
import argparse
import csv
import glob
import json
import math
import os
import re
import struct
import sys

TRAIN_LOSS = "Train/Samples/train_loss"
LR = "Train/Samples/lr"
LOSS_SCALE = "Train/Samples/loss_scale"
BREAKDOWN_PREFIX = "Train/Samples/elapsed_time_ms_"

failures = 0


def report(passed, what):
    global failures
    failures += 0 if passed else 1
    print(("ok: " if passed else "FAILED: ") + what)


def f32(x):
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def expected_series(metrics, args):
    """{tag: {index: value}} from metrics.jsonl, the last line for an index winning."""
    starts = [m for m in metrics if m["event"] == "start"]
    if not starts:
        sys.exit("check_monitors: no start event in the metrics file")
    n = args.train_batch_size or starts[0]["train_batch_size"]
    if not args.train_batch_size and any(s["train_batch_size"] != n for s in starts):
        sys.exit("check_monitors: runs with different train_batch_size; pass --train_batch_size")
    fp16 = args.fp16 == "yes" or (args.fp16 == "auto" and starts[0].get("dtype") == "fp16")
    want = {TRAIN_LOSS: {}, LR: {}}
    if fp16:
        want[LOSS_SCALE] = {}
    steps = {m["step"]: m for m in metrics if m["event"] == "step"}  # the last line for a step wins
    for m in metrics:
        if m["event"] == "step":
            k = m["step"]
            want[TRAIN_LOSS][(k - 1) * n if args.loss_index == "before" else k * n] = m[args.loss_key]
            source = m if args.scheduled == "used" else steps.get(k + 1)
            if source is not None:
                want[LR][k * n] = source[args.lr_key]
                if fp16:
                    want[LOSS_SCALE][k * n] = source["loss_scale"]
        elif m["event"] == "eval":
            want.setdefault(args.eval_tag, {})[m["step"] * n] = m["eval_loss"]
    return want, n, len(starts)


def compare(name, got, want, n, matches, loss_before):
    """got: {tag: [(index, value), ...]} in the order written."""
    tags = set(got)
    extra = sorted(t for t in tags - set(want) if not t.startswith(BREAKDOWN_PREFIX))
    report(set(want) <= tags and not extra,
           f"{name}: tags {sorted(tags)}" + (f"; missing {sorted(set(want) - tags)}" if set(want) - tags else "")
           + (f"; unexpected {extra}" if extra else ""))
    for tag, expect in want.items():
        series = got.get(tag, [])
        last = dict(series)
        bad = [(i, last.get(i), v) for i, v in sorted(expect.items()) if i not in last or not matches(last[i], v)]
        report(not bad, f"{name}: {tag}: {len(expect)} values from the metrics file at their indices"
               + (f"; first mismatches (index, written, expected): {bad[:3]}" if bad else ""))
    lr_steps = sorted({i for i, _ in got.get(LR, [])})
    last_step = max((i for i in want[TRAIN_LOSS]), default=0) // n + (1 if loss_before else 0)
    report(lr_steps == [k * n for k in range(1, last_step + 1)],
           f"{name}: {LR} written for every step 1..{last_step} (x {n} samples), nothing else")


def check_tensorboard(log_dir, want, n, runs, loss_before):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = sorted(glob.glob(os.path.join(log_dir, "*")))
    pattern = re.compile(r"events\.out\.tfevents\.\d{10}\.[^/]+\.\d+\.\d+")
    report(len(files) == runs and all(pattern.fullmatch(os.path.basename(f)) for f in files),
           f"tensorboard: {len(files)} event file(s) for {runs} run(s) in {log_dir}: "
           + ", ".join(os.path.basename(f) for f in files))
    acc = EventAccumulator(log_dir, size_guidance={"scalars": 0})
    acc.Reload()
    report(acc.file_version == 2.0, f"tensorboard: file_version {acc.file_version} (brain.Event:2)")
    got = {tag: [(s.step, s.value) for s in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    compare("tensorboard", got, want, n, lambda written, v: same(written, f32(v)), loss_before)


def check_csv(log_dir, want, n, runs, loss_before):
    names = sorted(os.listdir(log_dir)) if os.path.isdir(log_dir) else []
    got, formatted, headers_ok = {}, True, True
    for name in names:
        if not name.endswith(".csv"):
            report(False, f"csv: unexpected file {name} in {log_dir}")
            continue
        with open(os.path.join(log_dir, name), newline="") as f:
            rows = list(csv.reader(f))
        if not rows or rows[0][0] != "step" or len(rows[0]) != 2:
            report(False, f"csv: {name} does not start with a step,<name> header row: {rows[:1]}")
            continue
        header = rows[0]
        # The tag: the file name says it up to '/' vs '_' vs ' '; find it among the expected ones.
        tag = next((t for t in list(want) + [LR] if t.replace("/", "_").replace(" ", "_") + ".csv" == name),
                   name[:-4])
        headers_ok &= header[1] == tag.split("/")[-1] and rows.count(header) <= runs
        series = []
        for row in rows:
            if row == header:
                continue
            step, value = row
            python_int = re.fullmatch(r"-?[0-9]+", value) is not None and str(int(value)) == value
            formatted &= str(int(step)) == step and (python_int or value == repr(float(value)))
            series.append((int(step), float(value)))
        got[tag] = series
    report(bool(names) and headers_ok, f"csv: {', '.join(names) or 'no files'} in {log_dir}: "
           f"header rows step,<last tag part>, at most one per run ({runs})")
    report(formatted, "csv: steps and values written as Python writes an int or a float")
    compare("csv", got, want, n, lambda written, v: same(written, v) or same(written, f32(v)), loss_before)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("metrics")
    parser.add_argument("--tensorboard")
    parser.add_argument("--csv")
    parser.add_argument("--runs", type=int)
    parser.add_argument("--train_batch_size", type=int)
    parser.add_argument("--loss_index", choices=["before", "after"], default="before")
    parser.add_argument("--loss_key", default="loss")
    parser.add_argument("--lr_key", default="lr")
    parser.add_argument("--scheduled", choices=["used", "next"], default="used")
    parser.add_argument("--fp16", choices=["auto", "yes", "no"], default="auto")
    parser.add_argument("--eval_tag", default="Train/Samples/eval_loss")
    args = parser.parse_args()
    if not args.tensorboard and not args.csv:
        parser.error("give --tensorboard, --csv or both")
    with open(args.metrics) as f:
        metrics = [json.loads(line) for line in f if line.strip()]
    want, n, starts = expected_series(metrics, args)
    runs = args.runs or starts
    if args.tensorboard:
        check_tensorboard(args.tensorboard, want, n, runs, args.loss_index == "before")
    if args.csv:
        check_csv(args.csv, want, n, runs, args.loss_index == "before")
    print(f"check_monitors: {'FAILED' if failures else 'ok'} ({failures} failed)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
