#!/usr/bin/python3
"""A differential test of the PyTorch plugin (examples/torch, libskc_torch.so) on PyTorch's own
OpInfo database: the samples, reference inputs and error inputs of a list of OpInfos run on stock
torch and on the plugin's static kernels, forward and backward, and must agree.

In one process and one recording session:
  (a) the plugin loaded, not enabled: every sample runs on stock torch (results, exceptions);
  (b) torch.ops.skc.enable(...): every sample runs again and is recorded; compile() once;
  (c) every sample runs again (static kernels where compiled) and is compared with (a).
Backward: for every sample whose stock output is one floating tensor, torch.autograd.grad of it
with respect to its float32 input tensors (fresh leaf tensors in every phase) and a fixed random
grad_output, recorded and compiled in the same session.

A result agrees when it has the same shape, dtype and strides, is allclose (rtol 1e-4, atol 1e-5,
equal_nan), has NaN, +inf and -inf at the same positions, and is exactly zero with the same sign
bit where stock is exactly zero. An exception agrees when it has the same type (a different
message is noted, not a mismatch).

Needs SKC_TORCH_PLUGIN (the library; meson sets it). OPINFO_SEED draws other random values for the
samples (default 20240611). Writes the full result as JSON to
SKC_OPINFO_REPORT when set. Exit status 1 on any mismatch, or when no sample ran static at all.
Run with /usr/bin/python3 (Debian's torch 1.13).
"""
import faulthandler
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import types
import unittest
import warnings

os.environ["OPENBLAS_NUM_THREADS"] = "1"
# The test's own cache and base: nothing comes from, or goes to, a cache of the environment.
for _var in ("SKC_CACHE_DIR", "SKC_CACHE_MODE", "SKC_REMOTE_CACHE", "SKC_REMOTE_CACHE_READ_ONLY"):
    os.environ.pop(_var, None)

import torch  # noqa: E402

faulthandler.enable()
torch.set_num_threads(1)
# cat's error inputs pass out= tensors of the wrong shape; torch warns before it raises.
warnings.filterwarnings("ignore", message="An output with one or more elements was resized")

# torch.testing._internal.common_utils (imported by common_methods_invocations) imports
# `expecttest`, which Debian does not package. It only needs expecttest.TestCase (the base class of
# its TestCase) and expecttest.ACCEPT (read at import); this stand-in provides just those.
if "expecttest" not in sys.modules:
    try:
        import expecttest  # noqa: F401
    except ImportError:
        _expecttest = types.ModuleType("expecttest")

        class _ExpectTestCase(unittest.TestCase):
            pass

        _expecttest.TestCase = _ExpectTestCase
        _expecttest.ACCEPT = False
        sys.modules["expecttest"] = _expecttest

from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

from differential import (Copier, Outcome, compare_outcomes, describe, map_tree,  # noqa: E402
                          static_total, tensors_of)

PLUGIN = os.environ["SKC_TORCH_PLUGIN"]
SEED = int(os.environ.get("OPINFO_SEED", "20240611"))  # the samples' random values
DTYPE = torch.float32

OP_NAMES = ["mm", "addmm", "bmm", "matmul", "nn.functional.linear", "add", "mul", "sub", "div",
            "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "tanh", "rsqrt", "pow", "mean",
            "neg", "cat", "softmax", "log_softmax", "nn.functional.layer_norm", "contiguous", "where",
            "masked_fill", "rsub"]


# ---- inputs ----------------------------------------------------------------------------------------


class Case:
    """One sample, materialised once; fresh copies of its inputs for every phase."""

    def __init__(self, source, index, sample, error=None):
        self.source = source  # "sample", "reference" or "error"
        self.index = index
        self.name = getattr(sample, "name", "") or ""
        copier = Copier()
        self.input, self.args, self.kwargs = map_tree((sample.input, tuple(sample.args), dict(sample.kwargs)), copier)
        self.error = error  # (error_type name, error_regex) of an ErrorInput

    def fresh(self, requires_grad=False):
        """A copy of (input, args, kwargs) and, with requires_grad, the float32 tensors made leaves
        that require grad (not an out= tensor)."""
        inp, args, kwargs = map_tree((self.input, self.args, self.kwargs), Copier())
        leaves = []
        if requires_grad:
            seen = set()
            for t in tensors_of((inp, args, {k: v for k, v in kwargs.items() if k != "out"})):
                if t.dtype == DTYPE and id(t) not in seen:
                    seen.add(id(t))
                    t.requires_grad_(True)
                    leaves.append(t)
        return inp, args, kwargs, leaves

    def fingerprint(self):
        """Identity of the sample's contents: equal for bitwise equal samples."""
        h = hashlib.sha256()

        def visit(x):
            if isinstance(x, torch.Tensor):
                h.update(repr((str(x.dtype), tuple(x.shape), tuple(x.stride()), x.storage_offset())).encode())
                h.update(x.contiguous().numpy().tobytes() if x.dtype != torch.bfloat16 else repr(x.tolist()).encode())
            elif isinstance(x, (list, tuple)):
                h.update(f"{type(x).__name__}{len(x)}[".encode())
                for y in x:
                    visit(y)
                h.update(b"]")
            elif isinstance(x, dict):
                for k in sorted(x):
                    h.update(f"{k}=".encode())
                    visit(x[k])
            else:
                h.update(f"{type(x).__name__}:{x!r};".encode())

        visit((self.input, self.args, self.kwargs))
        return h.hexdigest()


def is_float32_input(x):
    """An error input counts when its input is a float32 tensor, or a sequence of tensors all float32."""
    if isinstance(x, torch.Tensor):
        return x.dtype == DTYPE
    if isinstance(x, (list, tuple)):
        ts = [y for y in x if isinstance(y, torch.Tensor)]
        return bool(ts) and all(t.dtype == DTYPE for t in ts)
    return False


def collect(op):
    """The cases of an OpInfo: float32 CPU samples and reference inputs (reference inputs that
    repeat a sample bitwise are dropped), and float32 error inputs."""
    cases, seen, dropped = [], set(), 0
    torch.manual_seed(SEED)
    for s in op.sample_inputs("cpu", DTYPE, requires_grad=False):
        c = Case("sample", len(cases), s)
        seen.add(c.fingerprint())
        cases.append(c)
    if op.reference_inputs_func is not None:  # else reference_inputs() is sample_inputs() again
        torch.manual_seed(SEED)
        for s in op.reference_inputs("cpu", DTYPE, requires_grad=False):
            c = Case("reference", len(cases), s)
            fp = c.fingerprint()
            if fp in seen:
                dropped += 1
                continue
            seen.add(fp)
            cases.append(c)
    errors, skipped_errors = [], 0
    if op.error_inputs_func is not None:
        torch.manual_seed(SEED)
        for e in op.error_inputs("cpu"):
            if not is_float32_input(e.sample_input.input):
                skipped_errors += 1
                continue
            errors.append(Case("error", len(errors), e.sample_input,
                               error=(getattr(e.error_type, "__name__", str(e.error_type)), e.error_regex)))
    return cases, errors, dropped, skipped_errors


# ---- running ---------------------------------------------------------------------------------------

def run_forward(op, case):
    inp, args, kwargs, _ = case.fresh()
    try:
        return Outcome(value=op(inp, *args, **kwargs))
    except Exception as e:  # noqa: BLE001 - any exception is a result to compare
        return Outcome(exc=(type(e).__name__, str(e)))


def run_backward(op, case, grad_out):
    inp, args, kwargs, leaves = case.fresh(requires_grad=True)
    try:
        out = op(inp, *args, **kwargs)
        grads = torch.autograd.grad(out, leaves, grad_outputs=grad_out, allow_unused=True)
        return Outcome(value=tuple(grads))
    except Exception as e:  # noqa: BLE001
        return Outcome(exc=(type(e).__name__, str(e)))


# ---- the test --------------------------------------------------------------------------------------

def main():
    t_start = time.monotonic()
    torch.ops.load_library(PLUGIN)

    by_name = {}
    for op in op_db:
        by_name.setdefault(op.name, []).append(op)
    skipped_names = [n for n in OP_NAMES if n not in by_name]
    print(f"names not in this torch's op_db (skipped): {', '.join(skipped_names) or 'none'}")
    ops, skipped_variants = [], []
    for n in OP_NAMES:
        for op in by_name.get(n, []):
            if not op.supports_dtype(DTYPE, "cpu"):
                skipped_variants.append(f"{op.name}.{op.variant_test_name}")
                continue
            ops.append(op)
    print(f"variants without float32 on CPU (skipped): {', '.join(skipped_variants) or 'none'}")

    entries = []
    for op in ops:
        cases, errors, dropped, skipped_errors = collect(op)
        label = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        entries.append({"op": op, "label": label, "cases": cases, "errors": errors, "dropped": dropped,
                        "skipped_errors": skipped_errors})
    t_collect = time.monotonic() - t_start

    # (a) stock: the plugin loaded, not enabled.
    t0 = time.monotonic()
    for e in entries:
        op = e["op"]
        e["stock"] = [run_forward(op, c) for c in e["cases"]]
        e["stock_err"] = [run_forward(op, c) for c in e["errors"]]
        e["grad_out"] = []
        e["stock_bwd"] = []
        for c, r in zip(e["cases"], e["stock"]):
            go = None
            out = r.value
            if r.exc is None and isinstance(out, torch.Tensor) and out.is_floating_point():
                _, _, _, leaves = c.fresh(requires_grad=True)
                if leaves:
                    g = torch.Generator().manual_seed(SEED + c.index)
                    go = torch.empty_like(out).copy_(torch.randn(out.shape, generator=g, dtype=out.dtype))
            e["grad_out"].append(go)
            e["stock_bwd"].append(None)
        for i, c in enumerate(e["cases"]):
            if e["grad_out"][i] is None:
                continue
            r = run_backward(op, c, e["grad_out"][i])
            # A sample whose output does not depend differentiably on its inputs has no backward.
            if r.exc is not None and "does not require grad" in r.exc[1]:
                e["grad_out"][i] = None
                continue
            e["stock_bwd"][i] = r
    t_stock = time.monotonic() - t0

    # (b) recording: the same calls, then one compile of everything recorded.
    base = tempfile.mkdtemp(prefix="skc-opinfo-")
    try:
        torch.ops.skc.enable(json.dumps({"base_dir": base, "jobs": 2,
                                         "cache_dir": os.path.join(base, "cache")}))
        t0 = time.monotonic()
        for e in entries:
            op = e["op"]
            for c in e["cases"]:
                run_forward(op, c)
            for c in e["errors"]:
                run_forward(op, c)
            for c, go in zip(e["cases"], e["grad_out"]):
                if go is not None:
                    run_backward(op, c, go)
        t_record = time.monotonic() - t0
        recorded = json.loads(torch.ops.skc.counters())
        t0 = time.monotonic()
        report = json.loads(torch.ops.skc.compile())
        t_compile = time.monotonic() - t0
        print(f"compile: outcome {report.get('outcome')}, {t_compile:.1f} s, counts {json.dumps(report.get('counts'))}",
              flush=True)

        # (c) static kernels where compiled, against (a).
        t0 = time.monotonic()
        mismatches, notes = [], []
        for e in entries:
            op = e["op"]
            e.update(fwd=0, fwd_static=0, bwd=0, bwd_static=0, err=0, err_static=0, mismatches=0, notes=0)

            def check(kind, c, stock, run):
                before = static_total()
                static = run()
                ran_static = static_total() > before
                inputs = tensors_of((c.input, c.args, c.kwargs))
                diffs, note = compare_outcomes(stock, static, kind, inputs)
                info = {"op": e["label"], "index": c.index, "source": c.source, "sample_name": c.name, "kind": kind,
                        "ran_static": ran_static, "input": describe(c.input), "args": describe(c.args),
                        "kwargs": describe(c.kwargs)}
                if c.error is not None:
                    info["expected_error"] = {"type": c.error[0], "regex": c.error[1]}
                if diffs:
                    mismatches.append(dict(info, differences=diffs))
                    e["mismatches"] += 1
                if note:
                    notes.append(dict(info, note=note))
                    e["notes"] += 1
                return ran_static

            for c, stock in zip(e["cases"], e["stock"]):
                e["fwd"] += 1
                e["fwd_static"] += check("forward", c, stock, lambda: run_forward(op, c))
            for c, stock in zip(e["errors"], e["stock_err"]):
                e["err"] += 1
                e["err_static"] += check("error", c, stock, lambda: run_forward(op, c))
            for c, go, stock in zip(e["cases"], e["grad_out"], e["stock_bwd"]):
                if go is None:
                    continue
                e["bwd"] += 1
                e["bwd_static"] += check("backward", c, stock, lambda: run_backward(op, c, go))
        t_static = time.monotonic() - t0
        final_counters = json.loads(torch.ops.skc.counters())
        torch.ops.skc.disable()
    finally:
        shutil.rmtree(base, ignore_errors=True)

    # ---- output -----------------------------------------------------------------------------------
    for m in mismatches:
        print(f"MISMATCH {m['op']} #{m['index']} ({m['source']}{', ' + m['sample_name'] if m['sample_name'] else ''}) "
              f"{m['kind']}{' [static]' if m['ran_static'] else ' [stock]'}: input {m['input']}, args {m['args']}, "
              f"kwargs {m['kwargs']}")
        for d in m["differences"]:
            print(f"    {d}")
    for n in notes:
        print(f"NOTE {n['op']} #{n['index']} {n['kind']}: {n['note']}")

    print()
    header = (f"{'OpInfo':34} {'fwd':>5} {'static':>6} {'bwd':>5} {'static':>6} {'err':>4} {'static':>6} "
              f"{'mismatch':>8} {'dups':>5}")
    print(header)
    print("-" * len(header))
    tot = dict(fwd=0, fwd_static=0, bwd=0, bwd_static=0, err=0, err_static=0, mismatches=0, dropped=0, notes=0)
    for e in entries:
        for k in tot:
            tot[k] += e[k]
        print(f"{e['label']:34} {e['fwd']:5} {e['fwd_static']:6} {e['bwd']:5} {e['bwd_static']:6} {e['err']:4} "
              f"{e['err_static']:6} {e['mismatches']:8} {e['dropped']:5}")
    print("-" * len(header))
    print(f"{'total':34} {tot['fwd']:5} {tot['fwd_static']:6} {tot['bwd']:5} {tot['bwd_static']:6} {tot['err']:4} "
          f"{tot['err_static']:6} {tot['mismatches']:8} {tot['dropped']:5}")
    ran_static = tot["fwd_static"] + tot["bwd_static"] + tot["err_static"]
    elapsed = time.monotonic() - t_start
    print(f"\ntotal: {tot['fwd'] + tot['bwd']} samples ({tot['fwd']} forward, {tot['bwd']} backward) and {tot['err']} "
          f"error inputs; {ran_static} ran static; {tot['mismatches']} mismatches; {tot['notes']} notes "
          f"(same exception type, different message); {tot['dropped']} reference inputs dropped as bitwise "
          f"repeats of samples")
    distinct = {op: c.get("recorded", 0) for op, c in recorded.items()}
    print(f"time: {elapsed:.1f} s (collect {t_collect:.1f}, stock {t_stock:.1f}, record {t_record:.1f}, "
          f"compile {t_compile:.1f}, static {t_static:.1f}); ops recorded per type: {json.dumps(distinct)}")

    result = {
        "torch": torch.__version__,
        "skipped_names": skipped_names,
        "skipped_variants": skipped_variants,
        "per_opinfo": [{k: e[k] for k in ["label", "fwd", "fwd_static", "bwd", "bwd_static", "err", "err_static",
                                          "mismatches", "notes", "dropped", "skipped_errors"]} for e in entries],
        "total": dict(tot, ran_static=ran_static),
        "mismatches": mismatches,
        "notes": notes,
        "compile_report": report,
        "counters_after_recording": recorded,
        "counters": final_counters,
        "seconds": {"total": elapsed, "collect": t_collect, "stock": t_stock, "record": t_record,
                    "compile": t_compile, "static": t_static},
    }
    path = os.environ.get("SKC_OPINFO_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1, default=str)

    failed = False
    if tot["mismatches"]:
        print(f"FAIL: {tot['mismatches']} mismatches between the static kernels and stock torch")
        failed = True
    if ran_static == 0:
        print("FAIL: no sample ran a static kernel, so the comparison tested nothing")
        failed = True
    if not failed:
        print("OK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
