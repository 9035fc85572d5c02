#!/usr/bin/env python3
"""gpu_perf.sh's summary: reads the parts' logs in --out, writes --out/summary.json and prints the
closing table (part, ours, PyTorch, ratio, verdict) and an OK / FAILED footer. Standard library only.

Usage: gpu_perf_summary.py --out DIR --parts gpt2,llama,... [--card TEXT --commit SHA --dirty 0|1
                           --date ISO --python_torch TEXT --time_limit S --quiet 0|1]
Exit codes: 0 no part failed (absent and skipped parts are reported, not failures); 1 a part failed;
2 bad usage.

The logs' protocol (gpu_perf.sh writes it; everything else in a log is the programs' own output):
  #> begin SIDE LIMITs: COMMAND...       a side (ours, pytorch, prepare, ...) starts
  #> end SIDE rc=N seconds=S limit=L cut=0|1 smi_peak_bytes=B
                                         it ended: exit code, wall seconds, its time limit (cut=1:
                                         the limit was what --time-limit left); the device memory
                                         nvidia-smi saw above the idle level, sampled every 200 ms
  #> absent SIDE REASON                  not in this build (reported, not a failure)
  #> skipped SIDE REASON                 not run (the --time-limit ran out)
What each program prints and what is read from it:
  bench_gpu_train        'RESULT tokens_per_s=N step_ms=N mfu=N peak_device_bytes=N target=N'
                         (key=value pairs; its device pool's peak is ours' peak_mem_bytes); without
                         mfu= there, the line '# median step ... MFU X% of ...'. A 'RESULT {json}'
                         line is read as well.
  torch_gpu_train.py     'RESULT {json}': tokens_per_s, step_ms, mfu, peak_mem_bytes (max allocated)...
  torch_sdpa_bench.py    one 'RESULT {json}' per case: T, hd, fwd_ms, fwd_bwd_ms, *_tflops.
  bench_gpu_attention    the same, as JSON or key=value pairs, matched on T and hd; 'fwd_bwd_ms'
                         (or 'ms') is its forward + backward time.
  ctest                  'N% tests passed, N tests failed out of N' and '***Skipped' lines.
  bench_gpu_offload      'RESULT d2h_ratio=N h2d_ratio=N min_ratio=N'.
"""
import argparse
import json
import os
import re
import sys

PARTS = ("gpt2", "llama", "attention", "tests", "loss", "profile", "offload")
# The llama part's sides besides ours (bf16 parameters, DeepSpeed's stage-0 BF16_Optimizer: fp32
# gradients, 18 B a parameter) and PyTorch's: what each runs, for the table.
EXTRA_SIDES = {"autocast": "fp32 parameters, bf16 activations (PyTorch's layout)",
               "zero1": "ZeRO stage 1: bf16 gradients, DeepSpeed's default there (16 B a parameter)"}
# The issue's targets (benchmarks, not timed tests: a miss is reported in the verdict, not failed).
TARGETS = {"gpt2": dict(ratio=1.0, mfu=0.40), "llama": dict(ratio=1.0, mem_ratio=1.0), "attention": dict(ratio=0.9),
           "offload": dict(mfu=0.40)}


# ---- reading a log ---------------------------------------------------------------------------

def read_sides(path):
    """{side: {"lines": [...], "rc": N, "seconds": S, "limit": L, "cut": 0|1, "smi_peak_bytes": B,
    "state": "ran" | "absent" | "skipped", "reason": str, "command": str}}, in order of appearance."""
    sides, current = {}, None
    if not os.path.exists(path):
        return sides
    with open(path, errors="replace") as f:
        for raw in f:
            line = raw.rstrip("\n")
            m = re.match(r"#> begin (\S+) (\d+)s: (.*)$", line)
            if m:
                current = sides[m.group(1)] = dict(state="ran", lines=[], command=m.group(3), limit=int(m.group(2)))
                continue
            m = re.match(r"#> end (\S+) (.*)$", line)
            if m and m.group(1) in sides:
                for k, v in re.findall(r"(\w+)=(\S*)", m.group(2)):
                    sides[m.group(1)][k] = int(v) if re.fullmatch(r"-?\d+", v) else (v or None)
                current = None
                continue
            m = re.match(r"#> (absent|skipped) (\S+) ?(.*)$", line)
            if m:
                sides[m.group(2)] = dict(state=m.group(1), reason=m.group(3), lines=[])
                current = None
                continue
            if current is not None:
                current["lines"].append(line)
    return sides


def parse_results(lines):
    """Every RESULT line: 'RESULT {json}' or 'RESULT k=v k=v'; numbers as numbers."""
    out = []
    for line in lines:
        if not line.startswith("RESULT "):
            continue
        body = line[len("RESULT "):].strip()
        if body.startswith("{"):
            try:
                out.append(json.loads(body))
            except ValueError:
                pass
            continue
        rec = {}
        for k, v in re.findall(r"([A-Za-z_][\w.]*)=(\S+)", body):
            try:
                rec[k] = float(v) if re.search(r"[.eE]", v) else int(v)
            except ValueError:
                rec[k] = v
        out.append(rec)
    return out


def side_status(side, gpus):
    """'ok', 'absent (...)', 'skipped (...)' or 'FAILED (...)'."""
    if side is None:
        return "not run"
    if side["state"] in ("absent", "skipped"):
        return f"{side['state']} ({side['reason']})" if side.get("reason") else side["state"]
    rc = side.get("rc")
    if rc is None:
        return "FAILED (no end: the script was stopped while it ran)"
    if rc == 0:
        return "ok"
    if rc in (124, 137):
        return (f"FAILED (stopped at the --time-limit after {side.get('seconds')} s)" if side.get("cut")
                else f"FAILED (over its {side.get('limit')} s limit)")
    if rc == 77:
        return "FAILED (skipped, exit 77, although nvidia-smi shows a GPU)" if gpus else "skipped (no GPU)"
    return f"FAILED (exit {rc})"


# ---- the figures of each part ----------------------------------------------------------------

def bench_train_figures(side):
    """bench_gpu_train's figures (the ours side of gpt2 and llama)."""
    recs = parse_results(side["lines"])
    fig = {}
    for r in recs:
        if "peak_device_bytes" in r:  # its device pool's peak: the counterpart of max_memory_allocated
            r.setdefault("peak_mem_bytes", r["peak_device_bytes"])
        fig.update({k: r[k] for k in ("tokens_per_s", "step_ms", "mfu", "peak_mem_bytes", "batch") if k in r})
    if "mfu" not in fig:
        for line in side["lines"]:
            m = re.match(r"# median step .*MFU ([0-9.]+)%", line)
            if m:
                fig["mfu"] = round(float(m.group(1)) / 100, 5)
    if side.get("smi_peak_bytes") is not None:
        fig["peak_mem_smi_bytes"] = side["smi_peak_bytes"]
    return fig


def torch_train_figures(side):
    recs = [r for r in parse_results(side["lines"]) if "tokens_per_s" in r]
    fig = {}
    if recs:
        r = recs[-1]
        fig = {k: r.get(k) for k in ("tokens_per_s", "step_ms", "mfu", "peak_mem_bytes", "peak_reserved_bytes",
                                     "batch", "torch", "compile", "gqa", "attention", "device")}
        if r.get("batch_search"):
            fig["batch_search"] = r["batch_search"]
    if side.get("smi_peak_bytes") is not None:
        fig["peak_mem_smi_bytes"] = side["smi_peak_bytes"]
    return fig


def train_part(name, sides, gpus):
    ours_s, torch_s = sides.get("ours"), sides.get("pytorch")
    part = dict(ours={}, pytorch={}, ratio=None)
    st = {s: side_status(sides.get(s), gpus) for s in sides}
    if ours_s and ours_s["state"] == "ran":
        part["ours"] = bench_train_figures(ours_s)
        if st["ours"] == "ok" and "tokens_per_s" not in part["ours"]:
            st["ours"] = "FAILED (no RESULT line)"
    if torch_s and torch_s["state"] == "ran":
        part["pytorch"] = torch_train_figures(torch_s)
        if st["pytorch"] == "ok" and not part["pytorch"].get("tokens_per_s"):
            st["pytorch"] = "FAILED (no RESULT line)"
    o, p = part["ours"], part["pytorch"]
    if o.get("tokens_per_s") and p.get("tokens_per_s"):
        part["ratio"] = round(o["tokens_per_s"] / p["tokens_per_s"], 4)
    # Peak memory, ours against PyTorch's: both programs' own reports where ours has one; else what
    # nvidia-smi saw of each process (CUDA context and allocator caches included on both sides; not
    # where PyTorch searched for its largest batch, which fills the device on purpose).
    if not (o.get("tokens_per_s") and p.get("tokens_per_s")):
        pass  # a side that did not finish has no peak worth comparing
    elif o.get("peak_mem_bytes") and p.get("peak_mem_bytes"):
        part["mem_ratio"], part["mem_basis"] = round(o["peak_mem_bytes"] / p["peak_mem_bytes"], 4), "own reports"
    elif o.get("peak_mem_smi_bytes") and p.get("peak_mem_smi_bytes") and not p.get("batch_search"):
        part["mem_ratio"] = round(o["peak_mem_smi_bytes"] / p["peak_mem_smi_bytes"], 4)
        part["mem_basis"] = "nvidia-smi samples"
    if not o.get("peak_mem_bytes") and o.get("peak_mem_smi_bytes"):
        o["peak_mem_bytes"] = o["peak_mem_smi_bytes"]  # ours has no report of its own yet
        o["peak_mem_basis"] = "nvidia-smi sample"
    # llama: ours again in other layouts (EXTRA_SIDES), each against PyTorch's speed and memory.
    for side in EXTRA_SIDES:
        a_s = sides.get(side)
        if not a_s or a_s["state"] != "ran":
            continue
        a = part["ours_" + side] = bench_train_figures(a_s)
        if st[side] == "ok" and "tokens_per_s" not in a:
            st[side] = "FAILED (no RESULT line)"
        if a.get("tokens_per_s") and p.get("tokens_per_s"):
            part["ratio_" + side] = round(a["tokens_per_s"] / p["tokens_per_s"], 4)
            if a.get("peak_mem_bytes") and p.get("peak_mem_bytes"):
                part["mem_ratio_" + side] = round(a["peak_mem_bytes"] / p["peak_mem_bytes"], 4)
    return part, st


def attention_part(sides, gpus):
    st = {s: side_status(sides.get(s), gpus) for s in sides}
    cases = {}
    for who in ("pytorch", "ours"):
        s = sides.get(who)
        if not s or s["state"] != "ran":
            continue
        for r in parse_results(s["lines"]):
            if "T" not in r or "hd" not in r:
                continue
            ms = r.get("fwd_bwd_ms", r.get("ms"))
            fig = {k: r[k] for k in ("fwd_ms", "fwd_bwd_tflops", "fwd_tflops", "B", "NH") if k in r}
            fig["fwd_bwd_ms"] = ms
            cases.setdefault((int(r["T"]), int(r["hd"])), {})[who] = fig
    for who in ("pytorch", "ours"):
        if st.get(who) == "ok" and not any(who in c for c in cases.values()):
            st[who] = "FAILED (no RESULT line with T and hd)"
    out, ratios = [], []
    for (T, hd), c in sorted(cases.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        row = dict(T=T, hd=hd, ours=c.get("ours", {}), pytorch=c.get("pytorch", {}), ratio=None)
        if row["ours"].get("fwd_bwd_ms") and row["pytorch"].get("fwd_bwd_ms"):
            row["ratio"] = round(row["pytorch"]["fwd_bwd_ms"] / row["ours"]["fwd_bwd_ms"], 4)  # our speed / theirs
            ratios.append(row["ratio"])
        out.append(row)
    part = dict(cases=out, ratio=min(ratios) if ratios else None,
                ours=dict(ms=sum(r["ours"]["fwd_bwd_ms"] for r in out if r["ours"].get("fwd_bwd_ms")) or None),
                pytorch=dict(ms=sum(r["pytorch"]["fwd_bwd_ms"] for r in out if r["pytorch"].get("fwd_bwd_ms")) or None))
    return part, st


def tests_part(sides, gpus):
    st = {s: side_status(sides.get(s), gpus) for s in sides}
    s = sides.get("ours")
    fig = {}
    if s and s["state"] == "ran":
        text = "\n".join(s["lines"])
        m = re.search(r"(\d+)% tests passed, (\d+) tests? failed out of (\d+)", text)
        if m:
            fig = dict(total=int(m.group(3)), failed=int(m.group(2)))
            fig["passed"] = fig["total"] - fig["failed"]
        fig["skipped"] = len(re.findall(r"\*\*\*Skipped", text))
        if st.get("ours") == "ok" and fig["skipped"] and gpus:
            st["ours"] = f"FAILED ({fig['skipped']} skipped although nvidia-smi shows a GPU)"
        elif st.get("ours") == "ok" and "total" not in fig:
            st["ours"] = "FAILED (no ctest summary line)"
    return dict(ours=fig, pytorch={}, ratio=None), st


def plain_part(name, sides, gpus):
    """loss, profile, offload: our program's RESULT figures and its exit code."""
    st = {s: side_status(sides.get(s), gpus) for s in sides}
    s = sides.get("ours")
    fig = {}
    if s and s["state"] == "ran":
        for r in parse_results(s["lines"]):
            fig.update(r)
        if s.get("seconds") is not None:
            fig["seconds"] = s["seconds"]
    # offload: ours is the training run; the copies' side (bench_gpu_offload) adds its ratios.
    c = sides.get("copies")
    if name == "offload" and c and c["state"] == "ran":
        for r in parse_results(c["lines"]):
            fig.update({k: v for k, v in r.items() if k.endswith("_ratio")})
    # offload: the same run's steps with --delayed_param_update (dpu_* figures), reported beside ours.
    dpu = {k[len("dpu_"):]: v for k, v in fig.items() if k.startswith("dpu_")} if name == "offload" else {}
    # loss: PyTorch's own bf16 autocast against its fp32 on the same test (torch_gpu_train.py
    # --loss_check), the yardstick for our drift.
    pyfig = {}
    py = sides.get("pytorch")
    if name == "loss" and py and py["state"] == "ran":
        for r in parse_results(py["lines"]):
            pyfig.update(r)
    part = dict(ours=fig, pytorch=pyfig, ratio=None)
    if dpu:
        part["ours_dpu"] = dpu
    return part, st


def combine(st):
    """A part's status from its sides': the first failure, else ok, else skipped, else absent."""
    failed = [f"{s} {v[len('FAILED '):]}" for s, v in st.items() if v.startswith("FAILED")]
    if failed:
        return "FAILED: " + "; ".join(failed)
    if any(v == "ok" for v in st.values()):
        return "ok"
    if not st:
        return "not run"
    return "; ".join(f"{s} {v}" for s, v in st.items())


def verdict(name, part):
    """The status, and for a part that ran, the issue's targets met or missed."""
    status = part["status"]
    t = TARGETS.get(name)
    if not status.startswith("ok") or not t:
        return status
    missed = []
    if "ratio" in t and part.get("ratio") is None:
        return status + "; no ratio (a side is absent)"
    if "ratio" in t and part["ratio"] < t["ratio"]:
        missed.append(f"ratio {part['ratio']:.2f} < {t['ratio']}")
    mfu = part.get("ours", {}).get("mfu")
    if "mfu" in t and mfu is not None and mfu < t["mfu"]:
        missed.append(f"MFU {mfu * 100:.1f}% < {t['mfu'] * 100:.0f}%")
    if "mem_ratio" in t and part.get("mem_ratio") is not None and part["mem_ratio"] > t["mem_ratio"]:
        missed.append(f"memory {part['mem_ratio']:.2f}x PyTorch's")
    return status + ("; target missed: " + ", ".join(missed) if missed else "; targets met")


# ---- the table -------------------------------------------------------------------------------

def human(n):
    for unit, div in (("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return f"{n:.0f}"


def cell(name, fig):
    if not fig:
        return "-"
    if name in ("gpt2", "llama"):
        if not fig.get("tokens_per_s"):
            return "-"
        text = f"{human(fig['tokens_per_s'])} tok/s"
        if fig.get("mfu") is not None:
            text += f" {fig['mfu'] * 100:.1f}%"
        if fig.get("peak_mem_bytes"):
            text += f" {fig['peak_mem_bytes'] / 2**30:.1f}G"
        if name == "llama" and fig.get("batch"):
            text += f" b{fig['batch']}"
        return text
    if name == "attention":
        return f"{fig['ms']:.2f} ms (sum)" if fig.get("ms") else "-"
    if name == "tests":
        if "total" not in fig:
            return "-"
        return f"{fig['passed']}/{fig['total']} passed" + (f" ({fig['skipped']} skipped)" if fig.get("skipped") else "")
    if name == "loss" and "max_loss_diff" in fig:
        text = f"max |bf16 - fp32| {fig['max_loss_diff']:.4f} over {fig.get('loss_steps', '?')} steps"
        if "max_rel_diff" in fig:
            text += f" ({fig['max_rel_diff'] * 100:.1f} %)"
        return text
    if name == "offload" and ("tokens_per_s" in fig or "d2h_ratio" in fig):
        text = f"{human(fig['tokens_per_s'])} tok/s, MFU {fig.get('mfu', 0) * 100:.1f}%" if "tokens_per_s" in fig else ""
        if "d2h_ratio" in fig:
            text += f"{'; ' if text else ''}copies d2h {fig['d2h_ratio']:.2f} h2d {fig['h2d_ratio']:.2f}"
        return text
    if "seconds" in fig:
        return f"ran {fig['seconds']} s"
    return "-"


def print_table(summary):
    rows = [("part", "ours", "PyTorch", "ratio", "verdict")]
    for name, part in summary["parts"].items():
        ratio = f"{part['ratio']:.2f}x" if part.get("ratio") is not None else "-"
        rows.append((name, cell(name, part.get("ours")), cell(name, part.get("pytorch")), ratio, part["verdict"]))
        for side, what in EXTRA_SIDES.items():
            if part.get("ours_" + side):
                r = part.get("ratio_" + side)
                m = part.get("mem_ratio_" + side)
                rows.append((f"  {side}", cell(name, part["ours_" + side]), "", f"{r:.2f}x" if r else "-",
                             f"{what}; memory {m:.2f}x PyTorch's" if m else ""))
        if name == "offload" and part.get("ours_dpu"):
            mfu = part["ours_dpu"].get("mfu")
            met = "" if mfu is None else (" (MFU target met)" if mfu >= TARGETS["offload"]["mfu"] else " (MFU target missed)")
            rows.append(("  dpu", cell(name, part["ours_dpu"]), "", "-", "--delayed_param_update" + met))
        if name == "attention":
            for c in part.get("cases", []):
                o, p = c["ours"].get("fwd_bwd_ms"), c["pytorch"].get("fwd_bwd_ms")
                rows.append((f"  T{c['T']} hd{c['hd']}", f"{o:.3f} ms" if o else "-",
                             f"{p:.3f} ms" + (f" {c['pytorch']['fwd_bwd_tflops']:.0f} TF/s"
                                              if c["pytorch"].get("fwd_bwd_tflops") else "") if p else "-",
                             f"{c['ratio']:.2f}x" if c.get("ratio") is not None else "-", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    print(f"\n== gpu_perf: {summary['card']}, commit {summary['commit']}{' (dirty)' if summary.get('dirty') else ''},"
          f" {summary['date']}")
    print("   ratio: our speed / PyTorch's (tokens/s, or PyTorch's ms / ours); offload: its training run's tokens/s "
          "and MFU, its copies / bare pinned copies; memory in GiB (ours: nvidia-smi's sample until it reports its own)")
    for r in rows:
        print("  " + "  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--card", default="unknown")
    p.add_argument("--commit", default="unknown")
    p.add_argument("--dirty", type=int, default=0)
    p.add_argument("--date", default="")
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--python_torch", default="")
    p.add_argument("--time_limit", type=int, default=0)
    p.add_argument("--quiet", type=int, default=0)
    a = p.parse_args()
    parts = [x for x in a.parts.split(",") if x]
    bad = [x for x in parts if x not in PARTS]
    if bad:
        print(f"gpu_perf_summary: unknown part '{bad[0]}' (known: {', '.join(PARTS)})", file=sys.stderr)
        return 2
    if not os.path.isdir(a.out):
        print(f"gpu_perf_summary: --out {a.out}: not a directory", file=sys.stderr)
        return 2
    summary = dict(date=a.date, card=a.card, commit=a.commit, dirty=bool(a.dirty), pytorch=a.python_torch,
                   time_limit_s=a.time_limit, parts={})
    for name in parts:
        sides = read_sides(os.path.join(a.out, f"{name}.log"))
        if name in ("gpt2", "llama"):
            part, st = train_part(name, sides, a.gpus)
        elif name == "attention":
            part, st = attention_part(sides, a.gpus)
        elif name == "tests":
            part, st = tests_part(sides, a.gpus)
        else:
            part, st = plain_part(name, sides, a.gpus)
        part["status"] = combine(st)
        part["sides"] = st
        part["verdict"] = verdict(name, part)
        part["log"] = f"{name}.log"
        summary["parts"][name] = part
    failed = [n for n, part in summary["parts"].items() if part["status"].startswith(("FAILED", "not run"))]
    summary["verdict"] = "FAILED: " + ", ".join(failed) if failed else "OK"
    tmp = os.path.join(a.out, "summary.json.tmp")
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(a.out, "summary.json"))
    if not a.quiet:
        print_table(summary)
        print(summary["verdict"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
