"""The harness of the example models llama.py and bert.py: each runs its model stock and on skc's
static kernels (the Python package skc_torch), checks the results against stock torch and times both.

Two phases, inference (model.eval(), torch.no_grad()) and one training step (forward, nll_loss,
backward, torch.optim.SGD step). Every run of either phase starts from the same copy of the
initial parameters (load_state_dict, a new optimizer, no gradients), outside what is timed.

  1. Stock (the plugin loaded, never enabled): the reference outputs (inference: the log-probs;
     training: the loss, every parameter's gradient and every parameter after the SGD step);
     --warmup untimed rounds of every phase; the wall time of each phase (median of --iters
     runs) and --profile-runs profiled runs.
  2. skc_torch.recording({"base_dir": --base, "timing": true}); each phase runs once (every op
     instance is recorded), then --iters more times with the plugin on but no kernel yet: the
     per op type "stock" time below (static_ms/stock_ms of skc_torch.counters()). Then
     session.compile(): one compile (or a cache hit) for both phases.
  3. Static: each phase runs once and is compared with the reference (torch.allclose, rtol 1e-4,
     atol 1e-5; the largest absolute difference is printed); --warmup untimed rounds; --iters
     timed runs (wall time and per op type time); --profile-runs profiled runs.
  4. Paired: --pairs rounds, each a stock run of every phase (skc_torch.disable()), then a static
     run of every phase (a new session on the same base: an untimed run of every phase records,
     compile() hits the cache); the SPEEDUP PAIRED is the median over the rounds of stock / static.
     Steps 1 and 3 are seconds apart, and other work on the machine can slow one side more than
     the other (in one busy hour, the SPEEDUP of steps 1 and 3 moved from 0.82x to 1.56x between
     runs of the two models, the paired one from 1.08x to 1.12x); the pairs see the same machine.

Timing hygiene: one thread; --warmup rounds (each phase run plain and profiled) before either
side is timed; gc.collect() before every run (not timed); and glibc's malloc is told to keep
freed memory (mallopt: no trimming, no mmap below 32 MiB; --malloc-default leaves it alone), as
the page faults of memory given back and taken again otherwise add milliseconds to random runs,
more to the first ones. Even so, a profiled run is at times slowed by the profiler's own memory
(page faults in whichever op first touches new memory, often aten::fill_ or a backward kernel),
more often in the earlier, stock, runs: the per aten op stock column is a guide, the wall times
and the per op type table are the comparison.

Per op type (the plugin's counter names) the script prints the calls per run (static, stock
fallback, unsupported), the time per run (the median over the runs) before compile() (every call
stock) and after (static calls plus the stock fallbacks), and their ratio. The overall speedup of
a phase is the median wall time stock (plugin off) over the median wall time static (plugin on,
with "timing" on: two clock reads per counted call are part of the static figure). Medians,
because other processes on the machine make single runs slow now and then.

The STATIC SHARE, how it is measured. The plugin's static path runs inside the overridden aten op
itself (aten::mm's CPU kernel is the plugin's), so a profiler (torch.profiler, CPU activity)
cannot tell a static call from a stock one; the counters can, per op type. For each phase the
script profiles --profile-runs static runs (after one more that warms the profiler up and is not
used), and reads the counters before and after each of them. Every aten op the profiler reports
(names aten::*) is grouped by the op type the plugin maps it to (OP_TYPE_ATEN below: MatMulV2 is
aten::mm and aten::addmm, Add is aten::add and aten::add_, ...). For a group, with S its aten ops'
self CPU time, N their number of calls in the profile, and s its static calls from the counters'
deltas over the same runs, the time counted static is S * min(1, s / N): an op type that ran
partly static counts its time in proportion to its static calls (N includes calls the plugin does
not see, e.g. those a stock kernel makes itself, so they count as stock). The share is that time
summed over the groups, divided by the self CPU time of all aten ops in the same runs (the ops the
plugin does not override, e.g. aten::embedding, aten::nll_loss and its backward, aten::fill_, and
the allocations, count as not static). The share is computed for each profiled run and the
median is reported, with the range: the profiler's own work (its memory, its processing) slows random
ops of some runs, static or not. Self time is used, so nothing is counted twice; an allocation a
static call makes (aten::empty, its child) is not counted as static. An op type in the counters
that OP_TYPE_ATEN does not know is reported and counted as not static. The profiler is also run
over stock runs (the plugin off) and the self time of each aten op is shown both ways.
"""
import argparse
import copy
import gc
import json
import os
import statistics
import sys
import time

# One thread, as the project's targets are measured (torch.set_num_threads does not limit this
# build's OpenBLAS): set before torch is imported.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"

import torch  # noqa: E402  (after the thread settings)
from torch.profiler import ProfilerActivity, profile  # noqa: E402
import skc_torch  # noqa: E402  (loads the plugin; PYTHONPATH=build/gcc/python in the build tree)

# The aten ops (profiler names) behind each op type of the plugin's counters: every op type the
# plugin records (mapping.hpp), the backward ones included; then names of op types it may come to
# record (Div, Silu, Pow, ReduceMeanD, ConcatV2), so that their static calls count as soon as it does.
OP_TYPE_ATEN = {
    "MatMulV2": ["aten::mm", "aten::addmm"],
    "FusedMatMul": ["aten::_addmm_activation"],
    "BatchMatMulV2": ["aten::bmm"],
    "Add": ["aten::add", "aten::add_"],
    "Mul": ["aten::mul", "aten::mul_"],
    "Relu": ["aten::relu", "aten::relu_"],
    "Gelu": ["aten::gelu"],
    "SoftmaxV2": ["aten::_softmax"],
    "LayerNormV3": ["aten::native_layer_norm"],
    "Transpose": ["aten::clone"],
    "Sub": ["aten::sub", "aten::sub_", "aten::rsub"],
    "Axpy": ["aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::rsub"],
    "RealDiv": ["aten::div", "aten::div_"],
    "Neg": ["aten::neg", "aten::neg_"],
    "Tanh": ["aten::tanh", "aten::tanh_"],
    "Rsqrt": ["aten::rsqrt", "aten::rsqrt_"],
    "Swish": ["aten::silu", "aten::silu_"],
    "Power": ["aten::pow", "aten::pow_"],
    "ReduceMean": ["aten::mean"],
    "ConcatD": ["aten::cat"],
    "LogSoftmaxV2": ["aten::_log_softmax"],
    "SelectV2": ["aten::where"],
    "MaskedFill": ["aten::masked_fill", "aten::masked_fill_"],
    "ReluGrad": ["aten::threshold_backward"],
    "GeluGrad": ["aten::gelu_backward"],
    "SiluGrad": ["aten::silu_backward"],
    "SoftmaxGrad": ["aten::_softmax_backward_data"],
    "LogSoftmaxGrad": ["aten::_log_softmax_backward_data"],
    "LayerNormGradV3": ["aten::native_layer_norm_backward"],
    "Div": ["aten::div", "aten::div_"],
    "Silu": ["aten::silu", "aten::silu_"],
    "Pow": ["aten::pow", "aten::pow_"],
    "ReduceMeanD": ["aten::mean"],
    "ConcatV2": ["aten::cat"],
}



def diff(after, before):
    """Per op type, the counters of `after` minus those of `before`."""
    return {op: {k: v - before.get(op, {}).get(k, 0) for k, v in c.items()} for op, c in after.items()}


class Phase:
    """One phase: inference or a training step. prepare() restores the initial parameters (not
    timed); body() is what is timed and profiled; results() the tensors checked against stock."""

    def __init__(self, name, model, state, forward, loss_of, lr):
        self.name, self.model, self.state, self.lr = name, model, state, lr
        self.forward, self.loss_of = forward, loss_of
        self.opt, self.out = None, None

    def prepare(self):
        gc.collect()  # the garbage of earlier runs (the profiler's above all) is not collected in a timed one
        self.model.load_state_dict(self.state)
        if self.name == "inference":
            self.model.eval()
        else:
            self.model.train()
            self.opt = torch.optim.SGD(self.model.parameters(), lr=self.lr)
            self.opt.zero_grad(set_to_none=True)

    def body(self):
        if self.name == "inference":
            with torch.no_grad():
                self.out = self.forward()
        else:
            out = self.forward()
            loss = self.loss_of(out[0] if isinstance(out, tuple) else out)
            loss.backward()
            self.opt.step()
            self.out = loss.detach()

    def results(self):
        """Copies of what the last run computed (copy_, which the plugin does not override: a
        clone() would be counted)."""
        def snapshot(t):
            return torch.empty_like(t).copy_(t.detach())

        if self.name == "inference":
            outs = self.out if isinstance(self.out, tuple) else (self.out,)
            return {f"output{i}": snapshot(o) for i, o in enumerate(outs)}
        res = {"loss": snapshot(self.out)}
        for n, p in self.model.named_parameters():
            if p.grad is not None:
                res[f"grad {n}"] = snapshot(p.grad)
            res[f"param {n}"] = snapshot(p)
        return res


def steady_malloc():
    """Keeps freed memory in glibc's heap (no trimming, no mmap below 32 MiB): otherwise glibc
    gives large freed blocks back to the kernel and the next run faults them in again, a cost of
    milliseconds per run that falls on whichever ops touch the memory first, stock or static
    alike, and fades as the process runs (so it weighs on the stock runs, which come first)."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_trim_threshold, 1 << 30)) and bool(libc.mallopt(m_mmap_threshold, 32 << 20))
    except (OSError, AttributeError):
        return False


def warm_up(phases, rounds):
    """Rounds of untimed runs of every phase, each once plain and once profiled: the first runs
    of a process are slower (the heap grows, the profiler's memory too, the caches), and the
    stock runs come first."""
    for _ in range(rounds):
        for phase in phases.values():
            phase.prepare()
            phase.body()
            phase.prepare()
            with profile(activities=[ProfilerActivity.CPU]):
                phase.body()


def run_once(phase):
    phase.prepare()
    phase.body()
    return phase.results()


def timed(phase, iters, with_counters):
    """Wall times (ms) of `iters` runs of the body and, if asked, the counters' delta of each run."""
    times, deltas = [], []
    for _ in range(iters):
        phase.prepare()
        c0 = skc_torch.counters() if with_counters else None
        t0 = time.perf_counter()
        phase.body()
        times.append((time.perf_counter() - t0) * 1e3)
        if with_counters:
            deltas.append(diff(skc_torch.counters(), c0))
    return times, deltas


def profiled(phase, runs, with_counters):
    """Per profiled run of the body (after one that is not kept): per aten op [calls, self CPU us],
    and the counters' delta over the run."""
    out = []
    for i in range(runs + 1):
        phase.prepare()
        c0 = skc_torch.counters() if with_counters else None
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            phase.body()
        delta = diff(skc_torch.counters(), c0) if with_counters else {}
        ops = {}
        for e in prof.key_averages():
            if e.key.startswith("aten::"):
                o = ops.setdefault(e.key, [0, 0.0])
                o[0] += e.count
                o[1] += e.self_cpu_time_total
        if i > 0:  # the first run warms the profiler up
            out.append((ops, delta))
    return out


def per_op_median(deltas):
    """Per op type: calls per run (each kind) and the median over the runs of its time (us)."""
    out = {}
    for op in sorted({op for d in deltas for op in d}):
        ds = [d.get(op, {}) for d in deltas]
        out[op] = {k: sum(d.get(k, 0) for d in ds) / len(ds) for k in ("static", "stock", "unsupported")}
        out[op]["us"] = statistics.median((d.get("static_ms", 0.0) + d.get("stock_ms", 0.0)) * 1e3 for d in ds)
    return out


def compare(stock, static):
    """(agree, largest abs difference, names of the tensors that differ)."""
    bad, worst = [], 0.0
    for name, ref in stock.items():
        got = static[name]
        if got.shape != ref.shape:
            bad.append(name)
            continue
        d = (got - ref).abs()
        d = d[torch.isfinite(d)]
        if d.numel():
            worst = max(worst, d.max().item())
        if not torch.allclose(got, ref, rtol=1e-4, atol=1e-5, equal_nan=True):
            bad.append(name)
    return not bad, worst, bad


def static_share(ops, delta):
    """The share of aten self time in calls whose static kernel ran (the module docstring)."""
    # Group the op types that share an aten op (Div and RealDiv would): one group, one fraction.
    groups = []  # [set of op types, set of aten names]
    for op in delta:
        names = set(OP_TYPE_ATEN.get(op, []))
        merged = [g for g in groups if g[1] & names]
        g = [{op}, names]
        for m in merged:
            g[0] |= m[0]
            g[1] |= m[1]
            groups.remove(m)
        groups.append(g)
    total = sum(t for _, t in ops.values())
    static_us, per_aten, unknown = 0.0, {}, []
    for types, names in groups:
        s = sum(delta[op].get("static", 0) for op in types)
        if not names:
            if s:
                unknown.append(sorted(types)[0])
            continue
        n = sum(ops.get(a, [0, 0.0])[0] for a in names)
        t = sum(ops.get(a, [0, 0.0])[1] for a in names)
        frac = min(1.0, s / n) if n else 0.0
        static_us += t * frac
        for a in names:
            per_aten[a] = ("/".join(sorted(types)), frac)
    return (static_us / total if total else 0.0), static_us, total, per_aten, unknown


def main(doc, build, ffn, ffn_help, extra_args=None, check_args=None, inference_checked="the outputs"):
    """Runs the model that build(args) makes (see the header comment); `doc` is the model script's
    docstring, `ffn` and `ffn_help` the default and help of --ffn, `extra_args(ap)` adds the
    model's own options, `check_args(ap, args)` rejects bad sizes with ap.error, and
    `inference_checked` says what the inference check compares."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--base", required=True, help="the plugin's base_dir (cache, run folders, op library)")
    # The default width is that of a small real encoder or decoder (512, 8 heads of 64). At a width
    # of 128 about 300 aten calls a run that no kernel takes (linear, reshape, t, slice, embedding,
    # empty: about 1 us each) are a third of the aten time, and the share measures them more than
    # the kernels (docs/performance.md).
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--ffn", type=int, default=ffn, help=ffn_help)
    if extra_args:
        extra_args(ap)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--iters", type=int, default=10, help="timed runs of each phase, each way")
    ap.add_argument("--warmup", type=int, default=3, help="untimed rounds of every phase before timing, each way")
    ap.add_argument("--profile-runs", type=int, default=5, help="profiled runs of each phase, each way")
    ap.add_argument("--pairs", type=int, default=10, help="rounds of a stock and a static run of every phase, alternating")
    ap.add_argument("--phases", default="inference,training", help="comma-separated: inference, training")
    ap.add_argument("--malloc-default", action="store_true",
                    help="leave glibc's malloc thresholds as they are (see steady_malloc)")
    ap.add_argument("--no-cache", action="store_true", help="always compile")
    ap.add_argument("--json", action="store_true", help="print a machine-readable summary as the last line")
    args = ap.parse_args()
    names = [p for p in args.phases.split(",") if p]
    if not names or any(p not in ("inference", "training") for p in names):
        ap.error("--phases takes inference and/or training")
    if args.iters < 1 or args.profile_runs < 1 or args.pairs < 1:
        ap.error("--iters, --profile-runs and --pairs must be at least 1")
    if check_args:
        check_args(ap, args)

    wall0 = time.monotonic()
    steady = False if args.malloc_default else steady_malloc()
    torch.set_num_threads(1)
    os.makedirs(args.base, exist_ok=True)
    torch.manual_seed(args.seed)
    model, forward, loss_of, description = build(args)
    state = copy.deepcopy(model.state_dict())
    phases = {n: Phase(n, model, state, forward, loss_of, args.lr) for n in names}
    print(f"model: {description}; one thread; torch {torch.__version__}; "
          f"malloc {'kept steady' if steady else 'as glibc sets it'}", flush=True)

    # 1. stock: the plugin is loaded, not enabled
    ref, stock_times, stock_prof = {}, {}, {}
    for n, ph in phases.items():
        ref[n] = run_once(ph)
    warm_up(phases, args.warmup)
    for n, ph in phases.items():
        stock_times[n], _ = timed(ph, args.iters, False)
        stock_prof[n] = [ops for ops, _ in profiled(ph, args.profile_runs, False)]

    # 2. record, then the per op type stock time with the plugin on and no kernel yet; compile
    config = {"base_dir": os.path.abspath(args.base), "timing": True,
              "disable_static_kernel_compile_cache": args.no_cache}
    session = skc_torch.recording(config)
    fallback = {}
    for n, ph in phases.items():
        run_once(ph)
    for n, ph in phases.items():
        _, fallback[n] = timed(ph, args.iters, True)
    t0 = time.monotonic()
    report = session.compile()
    compile_s = time.monotonic() - t0
    print(f"compile(): {report.outcome} in {compile_s:.2f} s, {report.counts.get('recorded', 0)} op instances "
          f"recorded, {report.counts.get('selected', 0)} selected; key {report.key[:16]}")
    for why in report.not_recorded:
        print(f"  not recorded: {why}")

    # 3. static
    summary = {"model": description, "args": vars(args), "outcome": report.outcome, "compile_s": compile_s,
               "phases": {}}
    ok = True
    checks = {n: compare(ref[n], run_once(ph)) for n, ph in phases.items()}
    warm_up(phases, args.warmup)
    for n, ph in phases.items():
        agree, worst, bad = checks[n]
        static_times, deltas = timed(ph, args.iters, True)
        runs = profiled(ph, args.profile_runs, True)
        stock_med, static_med = statistics.median(stock_times[n]), statistics.median(static_times)
        speedup = stock_med / static_med
        before, after = per_op_median(fallback[n]), per_op_median(deltas)
        ok = ok and agree and any(c["static"] for c in after.values())

        print(f"\n== {n} ==")
        what = inference_checked if n == "inference" else "loss, gradients and updated parameters"
        print(f"check against stock ({what}; rtol 1e-4, atol 1e-5): {'agree' if agree else 'DIFFER'}, "
              f"max abs diff {worst:.2e}" + (f"; differ: {', '.join(bad[:8])}" if bad else ""))

        print(f"\nper op type, per run (calls: mean, time: median of {args.iters} runs); stock us: the plugin on "
              f"before compile(), every call stock; static us: after it, static calls and stock fallbacks "
              f"(unsupported calls are not timed)")
        print(f"{'op type':<15}{'calls':>7}{'static':>8}{'stock':>7}{'unsup':>7}{'stock us':>11}{'static us':>11}"
              f"{'speedup':>9}")
        rows = []
        for op in sorted(set(before) | set(after)):
            s, t = before.get(op, {}), after.get(op, {})
            calls = t.get("static", 0) + t.get("stock", 0) + t.get("unsupported", 0)
            stock_us, static_us_op = s.get("us", 0.0), t.get("us", 0.0)
            row = {"op_type": op, "calls": calls, "static": t.get("static", 0), "stock": t.get("stock", 0),
                   "unsupported": t.get("unsupported", 0), "stock_us": stock_us, "static_us": static_us_op,
                   "speedup": stock_us / static_us_op if static_us_op > 0 else None}
            rows.append(row)
            sp = f"{row['speedup']:.2f}x" if row["speedup"] else "-"
            print(f"{op:<15}{calls:>7.0f}{row['static']:>8.0f}{row['stock']:>7.0f}{row['unsupported']:>7.0f}"
                  f"{stock_us:>11.1f}{static_us_op:>11.1f}{sp:>9}")
        st, sa = sum(r["stock_us"] for r in rows), sum(r["static_us"] for r in rows)
        print(f"{'all':<15}{sum(r['calls'] for r in rows):>7.0f}{sum(r['static'] for r in rows):>8.0f}"
              f"{sum(r['stock'] for r in rows):>7.0f}{sum(r['unsupported'] for r in rows):>7.0f}{st:>11.1f}{sa:>11.1f}"
              f"{(f'{st / sa:.2f}x' if sa else '-'):>9}")
        unsupported = {r["op_type"]: r["unsupported"] for r in rows if r["unsupported"]}
        if unsupported:
            print(f"unsupported calls per run (stock kernels; SKC_TORCH_VERBOSE=1 prints why): "
                  + ", ".join(f"{op} {c:.0f}" for op, c in unsupported.items()))

        # the profiler: per run the share; per aten op the median self time of the runs
        shares = [static_share(ops, delta) for ops, delta in runs]
        share = statistics.median(x[0] for x in shares)
        static_us = statistics.median(x[1] for x in shares)
        total_us = statistics.median(x[2] for x in shares)
        per_aten = shares[0][3]
        unknown = sorted({op for x in shares for op in x[4]})
        stock_runs, static_runs = stock_prof[n], [ops for ops, _ in runs]
        stock_total = statistics.median(sum(t for _, t in ops.values()) for ops in stock_runs)

        def med(rs, a, i):
            return statistics.median(ops.get(a, [0, 0.0])[i] for ops in rs)

        print(f"\naten ops' self CPU time (torch.profiler), per run (median of {len(runs)}): stock (plugin off) and "
              f"static; 'static': the share of the op's calls that ran static")
        print(f"{'aten op':<34}{'op type':<15}{'calls':>7}{'stock us':>10}{'static us':>10}{'static':>8}")
        names_all = {a for ops in static_runs + stock_runs for a in ops}
        keyed = sorted(((a, med(static_runs, a, 0), med(stock_runs, a, 1), med(static_runs, a, 1))
                        for a in names_all), key=lambda r: -max(r[2], r[3]))
        rest, others = [0, 0.0, 0.0], 0
        for a, c, t_stock, t_static in keyed:
            if a in per_aten or t_static >= 0.01 * total_us or t_stock >= 0.01 * stock_total:
                grp, frac = per_aten.get(a, ("-", 0.0))
                print(f"{a:<34}{grp:<15}{c:>7.0f}{t_stock:>10.1f}{t_static:>10.1f}"
                      f"{(f'{100 * frac:.0f}%' if a in per_aten else '-'):>8}")
            else:
                others += 1
                rest[0] += c
                rest[1] += t_stock
                rest[2] += t_static
        print(f"{f'({others} other aten ops)':<49}{rest[0]:>7.0f}{rest[1]:>10.1f}{rest[2]:>10.1f}")
        print(f"{'all aten ops':<49}{sum(r[1] for r in keyed):>7.0f}{stock_total:>10.1f}{total_us:>10.1f}")
        if unknown:
            print(f"op types without an aten mapping here, counted as not static: {', '.join(unknown)}")
        lo, hi = min(x[0] for x in shares), max(x[0] for x in shares)
        print(f"STATIC SHARE ({n}): {100 * share:.1f}% of aten self CPU time ran in static kernels "
              f"({static_us:.0f} of {total_us:.0f} us per run; runs {100 * lo:.1f}% to {100 * hi:.1f}%)")
        print(f"SPEEDUP ({n}): {speedup:.2f}x (median wall time of {args.iters} runs: stock {stock_med:.2f} ms, "
              f"static {static_med:.2f} ms)")

        summary["phases"][n] = {
            "agree": agree, "max_abs_diff": worst, "differ": bad,
            "stock_ms": stock_med, "static_ms": static_med, "speedup": speedup,
            "static_share": share, "static_aten_us": static_us, "aten_us": total_us,
            "stock_aten_us": stock_total, "per_op": rows,
            "unsupported": {r["op_type"]: r["unsupported"] for r in rows if r["unsupported"]},
        }

    totals = skc_torch.counters()  # all calls with the plugin on, the script's own checks (allclose) too

    # 4. paired: stock and static alternating, a new session on the same base for each static round
    print()
    not_hit = []
    paired_ms = {n: ([], []) for n in phases}  # stock, static
    for _ in range(args.pairs):
        skc_torch.disable()
        for n, ph in phases.items():
            paired_ms[n][0].append(timed(ph, 1, False)[0][0])
        session = skc_torch.recording(config)
        for ph in phases.values():
            run_once(ph)
        again = session.compile()
        if again.outcome != "hit":
            not_hit.append(f"a paired session's compile() of the same ops gave {again.outcome}, not a cache hit")
            ok = False
        for n, ph in phases.items():
            paired_ms[n][1].append(timed(ph, 1, False)[0][0])
    for n, (stock_ms, static_ms) in paired_ms.items():
        ratios = [a / b for a, b in zip(stock_ms, static_ms)]
        paired = statistics.median(ratios)
        print(f"SPEEDUP PAIRED ({n}): {paired:.2f}x (median of {args.pairs} rounds of stock / static, alternating; "
              f"rounds {min(ratios):.2f}x to {max(ratios):.2f}x; medians stock {statistics.median(stock_ms):.2f} ms, "
              f"static {statistics.median(static_ms):.2f} ms)")
        summary["phases"][n]["speedup_paired"] = paired

    elapsed = time.monotonic() - wall0
    print(f"total {elapsed:.1f} s; {'OK' if ok else 'FAILED'}")
    summary.update(ok=bool(ok), seconds=elapsed, counters=totals)
    if args.json:
        print(json.dumps(summary))
    if not ok:
        why = [f"{n}: results differ from stock" for n, s in summary["phases"].items() if not s["agree"]]
        why += [f"{n}: no static call" for n, s in summary["phases"].items()
                if not any(r["static"] for r in s["per_op"])]
        why += not_hit
        print("FAILED: " + "; ".join(why), file=sys.stderr)
        return 1
    return 0

