#!/usr/bin/python3
"""Static kernels for a PyTorch model through skc's plugin (the Python package skc_torch).

A torch.nn model (a TransformerEncoderLayer and an MLP: Linear, GELU, Linear, LayerNorm) runs
with stock torch, then with the plugin recording its ops (skc_torch.recording), then
session.compile() builds static kernels (or finds them in the cache), and the model runs again on
them. The script checks the outputs
against stock torch, prints per op type the calls and the time stock against static, and the
compile report. Run it twice with the same --base: the second process finds the package in the
cache and compiles nothing. Under torchrun every rank runs it; the node's leader compiles and
installs once for all (LOCAL_WORLD_SIZE, LOCAL_RANK).

    PYTHONPATH=build/gcc/python /usr/bin/python3 examples/torch/transformer.py --base /tmp/skc-torch
    PYTHONPATH=build/gcc/python torchrun --standalone --nproc_per_node 4 --redirects 9:1 --tee 9:1 \\
        examples/torch/transformer.py --base /tmp/skc-torch

skc_torch is imported from Python's path: an install, or PYTHONPATH=build/gcc/python in the build
tree of scripts/demo.sh and scripts/test.sh.

Exit status: 0 success; 1 a check failed (outputs differ, no static calls); 2 bad usage.
"""
import argparse
import json
import os
import sys
import time

# One thread, so that stock and static kernels are compared alike (torch.set_num_threads does not
# limit this build's OpenBLAS).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402  (after the thread settings)
from torch import nn  # noqa: E402
import skc_torch  # noqa: E402  (loads the plugin; PYTHONPATH=build/gcc/python in the build tree)


class Model(nn.Module):
    """A transformer encoder layer, then an MLP with GELU and a LayerNorm."""

    def __init__(self, d_model, heads, ffn, activation):
        super().__init__()
        self.encoder = nn.TransformerEncoderLayer(d_model, heads, ffn, dropout=0.0, activation=activation,
                                                  batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d_model, ffn), nn.GELU(), nn.Linear(ffn, d_model), nn.LayerNorm(d_model))

    def forward(self, x):
        return self.mlp(self.encoder(x))


def run_modes(model, x, modes):
    """The model's output in each mode: "grad" (autograd on: the encoder's general path) and
    "no_grad" (the encoder's fused fast path)."""
    out = {}
    for mode in modes:
        if mode == "no_grad":
            with torch.no_grad():
                out[mode] = model(x)
        else:
            out[mode] = model(x).detach()
    return out


def diff(after, before):
    """Per op type, the counters of `after` minus those of `before`."""
    out = {}
    for op, c in after.items():
        b = before.get(op, {})
        out[op] = {k: v - b.get(k, 0) for k, v in c.items()}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="skc-torch-base", help="output base (cache, run folders, op library)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=256)
    ap.add_argument("--activation", choices=["relu", "gelu"], default="relu")
    ap.add_argument("--modes", default="grad,no_grad", help="comma-separated: grad, no_grad")
    ap.add_argument("--iters", type=int, default=20, help="timed iterations each way")
    ap.add_argument("--no-cache", action="store_true", help="always compile")
    ap.add_argument("--report", help="write the report, counters and checks of this rank as JSON to this file")
    ap.add_argument("--quiet", action="store_true", help="print one line, not the tables")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in ("grad", "no_grad") for m in modes):
        ap.error("--modes takes grad and/or no_grad")

    rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.set_num_threads(1)
    os.makedirs(args.base, exist_ok=True)

    torch.manual_seed(0)
    model = Model(args.d_model, args.heads, args.ffn, args.activation).eval()
    x = torch.randn(args.batch, args.seq, args.d_model)
    stock_out = run_modes(model, x, modes)  # the plugin is loaded but not recording: stock kernels

    config = {"static_kernel_compile": True, "base_dir": os.path.abspath(args.base), "timing": True,
              "disable_static_kernel_compile_cache": args.no_cache}
    session = skc_torch.recording(config)
    run_modes(model, x, modes)  # records every op
    c0 = skc_torch.counters()
    for _ in range(args.iters):
        run_modes(model, x, modes)
    c1 = skc_torch.counters()
    t0 = time.monotonic()
    report = session.compile()
    compile_s = time.monotonic() - t0
    static_out = run_modes(model, x, modes)
    c2 = skc_torch.counters()
    for _ in range(args.iters):
        run_modes(model, x, modes)
    c3 = skc_torch.counters()

    stock_phase, static_phase = diff(c1, c0), diff(c3, c2)
    agree = {m: torch.allclose(static_out[m], stock_out[m], rtol=1e-4, atol=1e-5) for m in modes}
    max_err = {m: (static_out[m] - stock_out[m]).abs().max().item() for m in modes}
    totals = skc_torch.counters()
    used = sorted(op for op, c in totals.items() if c["recorded"] > 0)
    no_static = [op for op in used if totals[op]["static"] == 0]
    ok = all(agree.values()) and used and not no_static

    rows = []
    for op in used:
        s, t = stock_phase.get(op, {}), static_phase.get(op, {})
        calls = (t.get("static", 0) + t.get("stock", 0)) / args.iters
        stock_us = s.get("stock_ms", 0) * 1e3 / args.iters
        static_us = (t.get("static_ms", 0) + t.get("stock_ms", 0)) * 1e3 / args.iters
        rows.append({"op_type": op, "calls": calls, "static_calls": t.get("static", 0) / args.iters,
                     "stock_us": stock_us, "static_us": static_us})

    if args.report:
        with open(args.report, "w") as f:
            json.dump({"rank": rank, "report": report.raw, "counters": totals, "agree": agree, "max_abs_error": max_err,
                       "per_op": rows, "ok": bool(ok)}, f, indent=2)

    line = (f"rank {rank}: {report.outcome}, key {report.key[:12]}, "
            f"{sum(c['static'] for c in totals.values())} static calls, outputs "
            f"{'agree' if all(agree.values()) else 'DIFFER'} (max abs error {max(max_err.values()):.2e})")
    if args.quiet or rank != 0:
        print(line, flush=True)
    else:
        print(f"model: TransformerEncoderLayer(d_model {args.d_model}, heads {args.heads}, ffn {args.ffn}, "
              f"{args.activation}) + MLP(Linear, GELU, Linear, LayerNorm); input {list(x.shape)}; modes {', '.join(modes)}")
        print(f"\ntime per iteration (all modes), mean of {args.iters} iterations, one thread")
        print(f"{'op type':<15}{'calls':>7}{'static':>8}{'stock us':>11}{'static us':>11}{'speedup':>9}")
        for r in rows:
            speed = r["stock_us"] / r["static_us"] if r["static_us"] > 0 else 0
            print(f"{r['op_type']:<15}{r['calls']:>7.0f}{r['static_calls']:>8.0f}{r['stock_us']:>11.1f}"
                  f"{r['static_us']:>11.1f}{speed:>8.2f}x")
        st = sum(r["stock_us"] for r in rows)
        sa = sum(r["static_us"] for r in rows)
        print(f"{'all':<15}{sum(r['calls'] for r in rows):>7.0f}{sum(r['static_calls'] for r in rows):>8.0f}"
              f"{st:>11.1f}{sa:>11.1f}{(st / sa if sa else 0):>8.2f}x")
        unsupported = {op: c["unsupported"] for op, c in totals.items() if c["unsupported"]}
        if unsupported:
            print(f"calls the plugin cannot describe (stock kernels, all runs): {unsupported}")
        print(f"\nagreement with stock torch (rtol 1e-4, atol 1e-5): "
              + ", ".join(f"{m} {'yes' if agree[m] else 'NO'} (max abs error {max_err[m]:.2e})" for m in modes))
        print(f"compile() in {compile_s:.2f} s: {report}")
        print(f"  package: {report.package}")
        print(line)
    if not ok:
        why = [] if used else ["nothing was recorded"]
        why += [f"{m}: outputs differ from stock torch" for m in modes if not agree[m]]
        why += [f"{op}: no static call" for op in no_static]
        print(f"rank {rank}: FAILED: " + "; ".join(why), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
