#!/usr/bin/python3
"""A random differential probe of the PyTorch plugin (examples/torch, libskc_torch.so): calls that
no test of the project wrote by hand, with random shapes (1 to 4 dims, sizes around the vector
widths, some wide or empty), layouts (transposed, sliced with a step, offset, expanded, windows),
NumPy broadcasts, numbers, in-place and out= forms, and special values (NaN, infinities, signed
zeros, subnormals, values near float's limits), through every op type the plugin overrides, forward
and backward.

As test_opinfo.py, in one process and one recording session: every call on stock torch (the plugin
loaded, not enabled), then recorded, one compile, then again on the static kernels, compared with
stock by differential.py's rule. One exception: where a result is not allclose to stock's, or
stock has an exact zero where static has not, and nothing else differs, the static kernel's largest
error against a float64 reference may be up to 2x stock's (plus float's epsilon times the
reference's size). Two correct float sums in different orders are not allclose after cancellation,
and a sum that is 0 but for rounding is exactly 0 only in stock's own order; the project's accuracy
rule is 2x stock's error.

Matrix products get no finite values above 1e15: products beyond float's range overflow into inf
or NaN in the BLAS's own order of summation, which no other kernel reproduces.

Needs SKC_TORCH_PLUGIN. PROBE_SEED and PROBE_CASES change the draw (defaults 20261206, 1200).
Exit status 1 on any mismatch, or when no call ran static. Run with /usr/bin/python3.
"""
import json
import os
import random
import shutil
import sys
import tempfile
import time

os.environ["OPENBLAS_NUM_THREADS"] = "1"
for _var in ("SKC_CACHE_DIR", "SKC_CACHE_MODE", "SKC_REMOTE_CACHE", "SKC_REMOTE_CACHE_READ_ONLY"):
    os.environ.pop(_var, None)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from differential import Copier, Outcome, compare_outcomes, static_total  # noqa: E402

torch.set_num_threads(1)
SEED = int(os.environ.get("PROBE_SEED", "20261206"))
CASES = int(os.environ.get("PROBE_CASES", "1200"))
rng = random.Random(SEED)
nan, inf = float("nan"), float("inf")
SPECIAL = [nan, inf, -inf, -0.0, 0.0, 1e30, -1e30, 1e-40, -1e-40, 88.8, -88.8, 100.0, -100.0, 3.4e38, -3.4e38, 1e-7]


def values(shape, positive=False, special=True, huge=True):
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    t = torch.randn(shape, generator=g)
    if positive:
        t = t.abs() + 0.1
    if special and t.numel() and rng.random() < 0.5:
        flat = t.view(-1)
        for _ in range(rng.randint(1, 4)):
            flat[rng.randrange(flat.numel())] = rng.choice(SPECIAL)
    if rng.random() < 0.1:
        t = t * rng.choice([1e3, 1e-3, 1e6])
    if not huge:
        t = t.masked_fill(torch.isfinite(t) & (t.abs() > 1e15), 1.0)
    return t


def layout(shape, make):
    """A tensor of `shape` in a random layout."""
    k = rng.random()
    s = list(shape)
    if k < 0.45 or not s:
        return make(s)
    if k < 0.6 and len(s) >= 2:
        s[-1], s[-2] = s[-2], s[-1]
        return make(s).transpose(-1, -2)
    if k < 0.75:
        s[-1] *= 2
        return make(s)[..., ::2]
    if k < 0.85:
        s[0] += 1
        return make(s)[1:]
    if k < 0.95:
        d = rng.randrange(len(s))
        s[d] = 1
        return make(s).expand(*shape)
    s[-1] += 3
    return make(s)[..., 1:-2]


def rshape(lo=1, hi=4, top=40):
    """Sizes around the vector widths; sometimes a wide last dim, or an empty dim."""
    s = [rng.choice([1, 2, 3, 5, 7, 8, 16, 17, 31, 32, 33, rng.randint(1, top)]) for _ in range(rng.randint(lo, hi))]
    if rng.random() < 0.2:
        s[-1] = rng.choice([64, 100, 128, 257, 513])
    if rng.random() < 0.03:
        s[rng.randrange(len(s))] = 0
    return s


def bshape(shape):
    """A shape that broadcasts against `shape`."""
    out = [d if rng.random() < 0.6 else 1 for d in shape]
    return out[rng.randint(0, len(out)):]


def same_shape(a, b):
    return a.shape == torch.broadcast_shapes(a.shape, b.shape)


def unary():
    pos = rng.random() < 0.7
    name, fn, positive = rng.choice([
        ("relu", torch.relu, False), ("gelu", F.gelu, False),
        ("gelu tanh", lambda x: F.gelu(x, approximate="tanh"), False), ("silu", F.silu, False),
        ("tanh", torch.tanh, False), ("rsqrt", torch.rsqrt, pos), ("neg", torch.neg, False),
        ("pow 2", lambda x: torch.pow(x, 2), False), ("pow 3", lambda x: torch.pow(x, 3), False),
        ("pow 0.5", lambda x: torch.pow(x, 0.5), True), ("pow -1", lambda x: torch.pow(x, -1), False),
        ("pow 2.5", lambda x: torch.pow(x, 2.5), True), ("pow 0", lambda x: torch.pow(x, 0), False),
        ("pow -2", lambda x: torch.pow(x, -2), False), ("contiguous", lambda x: x.contiguous(), False),
        ("relu_", lambda x: torch.relu_(x.clone()), False), ("neg_", lambda x: x.clone().neg_(), False),
        ("tanh_", lambda x: x.clone().tanh_(), False), ("silu_", lambda x: F.silu(x.clone(), inplace=True), False),
    ])
    return name, fn, [layout(rshape(), lambda s: values(s, positive=positive))]


def binary():
    s = rshape()
    a, b = layout(s, values), layout(bshape(s), values)
    if rng.random() < 0.3:
        a, b = b, a
    num = rng.choice([2, 0.5, -1, 1e-3, 3.0, 2**60 + 2**36 + 1, 1e39, 0, -0.0, inf])
    alpha = rng.choice([-0.1, 2, 0.5, 1])
    name, fn = rng.choice([
        ("add", torch.add), ("sub", torch.sub), ("mul", lambda a, b: a * b), ("div", lambda a, b: a / b),
        ("add alpha", lambda a, b: torch.add(a, b, alpha=alpha)), ("sub alpha", lambda a, b: torch.sub(a, b, alpha=alpha)),
        ("rsub", torch.rsub), ("plus a number", lambda a, b: a + num), ("times a number", lambda a, b: a * num),
        ("divided by a number", lambda a, b: a / num), ("a number minus", lambda a, b: num - a),
        ("add_", lambda a, b: a.clone().add_(b) if same_shape(a, b) else a + b),
        ("mul_", lambda a, b: a.clone().mul_(b) if same_shape(a, b) else a * b),
        ("div_", lambda a, b: a.clone().div_(b) if same_shape(a, b) else a / b),
        ("sub_ alpha", lambda a, b: a.clone().sub_(b, alpha=alpha) if same_shape(a, b) else a - b),
        ("div trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc")),
        ("div floor", lambda a, b: torch.div(a, b, rounding_mode="floor")),
        ("add out=", lambda a, b: torch.add(a, b, out=torch.empty(0))),
        ("mul out=", lambda a, b: torch.mul(a, b, out=torch.empty(torch.broadcast_shapes(a.shape, b.shape)))),
    ])
    return name, fn, [a, b]


def rows():
    s = rshape()
    x = layout(s, values)
    k = rng.random()
    d = rng.randrange(-len(s), len(s))
    if k < 0.25:
        dims = sorted(rng.sample(range(len(s)), rng.randint(1, len(s))))
        keep = rng.random() < 0.6
        return f"mean {dims}", lambda x: torch.mean(x, dims, keepdim=keep), [x]
    if k < 0.45:
        return "softmax", lambda x: torch.softmax(x, d), [x]
    if k < 0.6:
        return "log_softmax", lambda x: torch.log_softmax(x, d), [x]
    if k < 0.7:
        mask = torch.rand(s) < 0.3
        return "softmax under a -inf mask", lambda x: torch.softmax(x.masked_fill(mask, -inf), -1), [x]
    norm = s[-rng.randint(1, len(s)):]
    w, b = values(norm, special=False), values(norm, special=False)
    eps = rng.choice([1e-5, 1e-6, 1e-12, 0.1])
    if rng.random() < 0.2:
        return "layer_norm without weight", lambda x: F.layer_norm(x, norm, None, None, eps), [x]
    if rng.random() < 0.1:
        bad = [norm[-1] + 1]
        return "layer_norm of a wrong shape", lambda x, w, b: F.layer_norm(x, bad, w, b, eps), [x, w, b]
    return "layer_norm", lambda x, w, b: F.layer_norm(x, norm, w, b, eps), [x, w, b]


def products():
    def mv(s):
        return values(s, huge=False)
    m, k, n = (rng.choice([1, 2, 3, 7, 8, 16, 17, 24, 33, 64, 129, 257, rng.randint(1, 70)]) for _ in range(3))
    kind = rng.choice(["mm", "addmm", "bmm", "linear", "linear without bias", "matmul 3d", "matmul vector",
                       "addmm relu", "addmm gelu", "addmm alpha beta"])
    if kind == "bmm":
        nb = rng.randint(1, 5)
        return kind, torch.bmm, [layout([nb, m, k], mv), layout([nb, k, n], mv)]
    if kind == "matmul 3d":
        return kind, torch.matmul, [layout([rng.randint(1, 4), m, k], mv), layout([k, n], mv)]
    if kind == "matmul vector":
        return kind, torch.matmul, [layout([m, k], mv), layout([k], mv)]
    if kind.startswith("linear"):
        x, w = layout([rng.randint(1, 3), m, k], mv), layout([n, k], mv)
        return (kind, F.linear, [x, w]) if kind.endswith("bias") else (kind, F.linear, [x, w, layout([n], mv)])
    a, b = layout([m, k], mv), layout([k, n], mv)
    if kind == "mm":
        return kind, torch.mm, [a, b]
    bias = layout(rng.choice([[n], [m, n], [1, n], [m, 1]]), mv)
    if kind == "addmm":
        return kind, torch.addmm, [bias, a, b]
    if kind == "addmm alpha beta":
        beta, alpha = rng.choice([0, 0.5, 1, 2]), rng.choice([0.5, 1, -1])
        return kind, lambda c, a, b: torch.addmm(c, a, b, beta=beta, alpha=alpha), [bias, a, b]
    gelu = kind == "addmm gelu"
    return kind, lambda c, a, b: torch._addmm_activation(c, a, b, use_gelu=gelu), [bias, a, b]


def selects():
    s = rshape()
    k = rng.random()
    if k < 0.4:
        d = rng.randrange(len(s))
        parts = []
        for _ in range(rng.randint(1, 5)):
            p = list(s)
            p[d] = rng.randint(0, 9)
            parts.append(layout(p, values))
        return "cat", lambda *xs: torch.cat(list(xs), d), parts
    mask = layout(bshape(s), lambda sh: torch.rand(sh) < 0.5)
    x = layout(s, values)
    if k < 0.7:
        y = layout(bshape(s), values) if rng.random() < 0.7 else torch.tensor(-inf)
        if rng.random() < 0.5:
            return "where", torch.where, [mask, x, y]
        return "where, operands swapped", lambda m, x, y: torch.where(m, y, x), [mask, x, y]
    v = rng.choice([-inf, -1e9, 0.0, nan, 2])
    if rng.random() < 0.3:
        return "masked_fill_", lambda x, m: x.clone().masked_fill_(m, v) if same_shape(x, m) else x, [x, mask]
    return "masked_fill", lambda x, m: x.masked_fill(m, v), [x, mask]


class Case:
    def __init__(self, index):
        self.index = index
        self.name, self.fn, self.tensors = rng.choice([unary, unary, binary, binary, rows, products, selects])()

    def fresh(self, grad=False):
        copy = Copier()
        ts = [copy(t) for t in self.tensors]
        if grad:
            ts = [t.detach().requires_grad_(True) if t.is_floating_point() else t for t in ts]
        return ts, [t for t in ts if t.requires_grad]

    def forward(self):
        ts, _ = self.fresh()
        try:
            return Outcome(value=self.fn(*ts))
        except Exception as e:  # noqa: BLE001 - an exception is a result to compare
            return Outcome(exc=(type(e).__name__, str(e)))

    def backward(self, dy):
        ts, leaves = self.fresh(grad=True)
        try:
            return Outcome(value=tuple(torch.autograd.grad(self.fn(*ts), leaves, dy, allow_unused=True)))
        except Exception as e:  # noqa: BLE001
            return Outcome(exc=(type(e).__name__, str(e)))

    def reference(self, dy):
        """The call in float64 (forward when dy is None)."""
        ts = [t.detach().double().requires_grad_(dy is not None) if t.is_floating_point() else t for t in self.tensors]
        out = self.fn(*ts)
        if dy is None:
            return out
        return torch.autograd.grad(out, [t for t in ts if t.requires_grad], dy.double(), allow_unused=True)


def max_error(v, ref):
    d = (v.double() - ref.double()).abs()
    d = d[torch.isfinite(d)]
    return float(d.max()) if d.numel() else 0.0


def within_2x(stock, static, ref):
    """Static's largest error against the float64 reference at most 2x stock's, tensor by tensor."""
    if isinstance(stock, torch.Tensor):
        r = ref.double()
        slack = 1.2e-7 * float(r[torch.isfinite(r)].abs().max()) if r.numel() and torch.isfinite(r).any() else 0.0
        return max_error(static, r) <= 2 * max_error(stock, r) + slack
    return all(within_2x(a, b, c) for a, b, c in zip(stock, static, ref) if a is not None and c is not None)


def main():
    t0 = time.monotonic()
    torch.ops.load_library(os.environ["SKC_TORCH_PLUGIN"])
    cases = [Case(i) for i in range(CASES)]
    stock, dys, stock_bwd = [], [], []
    for c in cases:
        r = c.forward()
        stock.append(r)
        dy = b = None
        if r.exc is None and isinstance(r.value, torch.Tensor) and r.value.is_floating_point() and \
                not c.name.endswith("_"):
            dy = values(list(r.value.shape), special=False)
            b = c.backward(dy)
            if b.exc is not None and "does not require grad" in b.exc[1]:
                dy = b = None
        dys.append(dy)
        stock_bwd.append(b)
    base = tempfile.mkdtemp(prefix="skc-probe-")
    try:
        torch.ops.skc.enable(json.dumps({"base_dir": base, "jobs": 2, "cache_dir": os.path.join(base, "cache")}))
        for c, dy in zip(cases, dys):
            c.forward()
            if dy is not None:
                c.backward(dy)
        t1 = time.monotonic()
        report = json.loads(torch.ops.skc.compile())
        t_compile = time.monotonic() - t1
        print(f"compile: outcome {report.get('outcome')}, {t_compile:.1f} s, counts {json.dumps(report.get('counts'))}")
        calls = ran = accurate = 0
        mismatches = []
        for c, want, dy, want_bwd in zip(cases, stock, dys, stock_bwd):
            for kind, w, run in (("forward", want, c.forward), ("backward", want_bwd, lambda: c.backward(dy))):
                if w is None:
                    continue
                calls += 1
                before = static_total()
                got = run()
                ran += static_total() > before
                diffs, _ = compare_outcomes(w, got, kind, c.tensors)
                if diffs and all("not allclose" in d or "exact zero" in d for d in diffs):
                    if within_2x(w.value, got.value, c.reference(None if kind == "forward" else dy)):
                        accurate += 1
                        diffs = []
                if diffs:
                    shapes = [(list(t.shape), t.stride(), t.storage_offset()) for t in c.tensors]
                    mismatches.append((c, kind, shapes, diffs))
        torch.ops.skc.disable()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for c, kind, shapes, diffs in mismatches:
        print(f"MISMATCH #{c.index} {c.name} {kind}: inputs (shape, strides, offset) {shapes}")
        for d in diffs:
            print(f"    {d[:600]}")
    print(f"total: {len(cases)} cases (seed {SEED}), {calls} calls forward and backward, {ran} ran static; "
          f"{accurate} not allclose to stock (or not its exact zero) but within 2x its error against float64; {len(mismatches)} mismatches; "
          f"{time.monotonic() - t0:.1f} s")
    if mismatches or ran == 0:
        print("FAIL: " + ("mismatches with stock torch" if mismatches else "no call ran a static kernel"))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
