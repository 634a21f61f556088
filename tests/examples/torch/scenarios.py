#!/usr/bin/python3
"""What the plugin tests run, each in a process of its own (the plugin holds one recording session
per process): `scenarios.py NAME ARGS...` prints one JSON document with what it saw.

The models here are built from torch.nn layers independently of examples/torch/transformer.py.
"""
import json
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

PLUGIN = os.environ["SKC_TORCH_PLUGIN"]


class EncoderModel(nn.Module):
    """TransformerEncoderLayer (batch first, ReLU) and an MLP with GELU (erf) and LayerNorm."""

    def __init__(self, d, heads, ffn):
        super().__init__()
        self.enc = nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, ffn), nn.GELU(), nn.Linear(ffn, d), nn.LayerNorm(d))

    def forward(self, x):
        return self.mlp(self.enc(x))


class PreNormGeluEncoder(nn.Module):
    """Sequence-first, pre-norm TransformerEncoderLayer with GELU, then a Linear without bias."""

    def __init__(self, d, heads, ffn):
        super().__init__()
        self.enc = nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0, activation="gelu", norm_first=True)
        self.out = nn.Linear(d, d, bias=False)

    def forward(self, x):
        return self.out(self.enc(x.transpose(0, 1)).transpose(0, 1))


class MixerModel(nn.Module):
    """Linear, GELU (tanh), ReLU, LayerNorm over two dims, Softmax, torch.matmul, torch.bmm, and
    products with a tensor and with a Python number."""

    def __init__(self, seq, d, ffn):
        super().__init__()
        self.up = nn.Linear(d, ffn)
        self.act = nn.GELU(approximate="tanh")
        self.down = nn.Linear(ffn, d)
        self.relu = nn.ReLU()
        self.norm = nn.LayerNorm([seq, d])
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x):
        h = self.down(self.act(self.up(x)))
        h = self.norm(self.relu(h) + x)
        scores = self.softmax(torch.matmul(h, h.transpose(1, 2)))
        return torch.bmm(scores, h) * h * 0.5  # a tensor, then a Python number


MODELS = {
    "encoder": lambda b, s, d: (EncoderModel(d, 4, 2 * d), torch.randn(b, s, d)),
    "prenorm_gelu": lambda b, s, d: (PreNormGeluEncoder(d, 2, 3 * d), torch.randn(b, s, d)),
    "mixer": lambda b, s, d: (MixerModel(s, d, 2 * d), torch.randn(b, s, d)),
}


def outputs(model, x):
    """With autograd (the encoder's general path) and under no_grad (its fused fast path)."""
    with_grad = model(x).detach()
    with torch.no_grad():
        without = model(x)
    return {"grad": with_grad, "no_grad": without}


def counters():
    return json.loads(torch.ops.skc.counters())


def compare(got, want):
    return {m: {"allclose": bool(torch.allclose(got[m], want[m], rtol=1e-4, atol=1e-5)),
                "equal": bool(torch.equal(got[m], want[m])),
                "max_abs_error": float((got[m] - want[m]).abs().max())} for m in want}


def scenario_model(name, batch, seq, d, base):
    """Record, compile, run on static kernels; then a batch size seen only after compile."""
    torch.manual_seed(int(batch) * 1000 + int(seq))
    model, x = MODELS[name](int(batch), int(seq), int(d))
    model.eval()
    stock = outputs(model, x)
    x_new = torch.randn(int(batch) + 1, int(seq), int(d))
    stock_new = outputs(model, x_new)

    torch.ops.skc.enable(json.dumps({"static_kernel_compile": True, "base_dir": base}))
    recorded = outputs(model, x)
    report = json.loads(torch.ops.skc.compile())
    static = outputs(model, x)
    after_static = counters()
    new = outputs(model, x_new)
    after_new = counters()
    torch.ops.skc.disable()
    disabled = outputs(model, x)
    after_disable = counters()
    return {"report": report, "counters": after_static,
            "recording_run": compare(recorded, stock), "static_run": compare(static, stock),
            "new_shape_run": compare(new, stock_new), "disabled_run": compare(disabled, stock),
            "counters_new_shape": {op: {k: v - after_static.get(op, {}).get(k, 0) for k, v in c.items()}
                                   for op, c in after_new.items()},
            "counters_changed_after_disable": after_disable != after_new}


def scenario_bad_configs(base, unwritable):
    """enable() with each bad config: the RuntimeError's message, and whether a good one then works."""
    configs = {
        "unknown field": {"static_kernel_compile": True, "base_dir": base, "op_blacklst": ["Gelu"]},
        "wrong type": {"static_kernel_compile": "yes", "base_dir": base},
        "wrong type in list": {"base_dir": base, "op_blacklist": ["Gelu", 7]},
        "out of range": {"base_dir": base, "jobs": 0},
        "missing compiler": {"base_dir": base, "compiler": "/nonexistent/op_compiler"},
        "compiler not executable": {"base_dir": base, "compiler": os.path.join(base, "not_executable")},
        "unwritable base": {"base_dir": unwritable},
        "base is a file": {"base_dir": os.path.join(base, "not_executable")},
        "empty device": {"base_dir": base, "device": ""},
        "not an object": ["base_dir", base],
        "negative output cache": {"base_dir": base, "output_cache_mib": -1},
        "fractional output cache": {"base_dir": base, "output_cache_mib": 1.5},
        "output cache too large": {"base_dir": base, "output_cache_mib": 2**20 + 1},
        "unwritable base with a cache size": {"base_dir": unwritable, "output_cache_mib": 0},
    }
    with open(os.path.join(base, "not_executable"), "w") as f:
        f.write("#!/bin/sh\n")
    torch.ops.load_library(PLUGIN)
    errors = {}
    for what, cfg in configs.items():
        try:
            torch.ops.skc.enable(json.dumps(cfg))
            errors[what] = None
            torch.ops.skc.disable()
        except RuntimeError as e:
            errors[what] = str(e)
    cache_after_bad = json.loads(torch.ops.skc.output_cache())
    errors["not json"] = None
    try:
        torch.ops.skc.enable("{base_dir: 1")
    except RuntimeError as e:
        errors["not json"] = str(e)
    try:
        torch.ops.skc.compile()
        errors["compile without enable"] = None
    except RuntimeError as e:
        errors["compile without enable"] = str(e)
    # Nothing was left half-enabled: a good config works, records and compiles.
    torch.ops.skc.enable(json.dumps({"base_dir": base}))
    try:
        torch.ops.skc.enable(json.dumps({"base_dir": base}))
        errors["enable twice"] = None
    except RuntimeError as e:
        errors["enable twice"] = str(e)
    x = torch.randn(8, 16)
    torch.relu(x)
    report = json.loads(torch.ops.skc.compile())
    return {"errors": errors, "good_report": report, "entries": sorted(os.listdir(base)),
            "output_cache_after_bad": cache_after_bad}


def scenario_output_cache(base):
    """The static outputs' memory (output_cache_mib): a freed output's block serves the next call of
    its size; a live one is never handed out twice; torch.profiler sees the allocations; at 0 MiB
    nothing is kept."""
    torch.manual_seed(3)
    x, y = torch.randn(64, 512), torch.randn(64, 512)
    s = torch.randn(4, 64, 64)
    p = torch.softmax(s, -1)
    want_add, want_grad = x + y, torch._softmax_backward_data(s, p, -1, torch.float32)

    def run_calls():
        """Five calls of each op, each output freed before the next: their addresses and results."""
        addrs, equal = [], True
        for _ in range(5):
            z = x + y
            g = torch._softmax_backward_data(s, p, -1, torch.float32)
            addrs.append([z.data_ptr(), g.data_ptr()])
            equal = equal and torch.equal(z, want_add) and torch.allclose(g, want_grad, rtol=1e-4, atol=1e-5)
            del z, g
        return addrs, equal

    def stats():
        return json.loads(torch.ops.skc.output_cache())

    out = {}
    for mib in (None, 0):
        cfg = {"base_dir": base}
        if mib is not None:
            cfg["output_cache_mib"] = mib
        torch.ops.skc.enable(json.dumps(cfg))
        x + y
        torch._softmax_backward_data(s, p, -1, torch.float32)
        report = json.loads(torch.ops.skc.compile())
        before = stats()
        addrs, equal = run_calls()
        after = stats()
        z1, z2 = x + y, x + y  # both alive: two blocks
        r = {"outcome": report["outcome"], "before": before, "after": after, "addrs": addrs, "equal": equal,
             "two_live_distinct": z1.data_ptr() != z2.data_ptr(),
             "two_live_equal": torch.equal(z1, want_add) and torch.equal(z2, want_add),
             "static": counters()["Add"]["static"], "static_grad": counters()["SoftmaxGrad"]["static"]}
        del z1, z2
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
            w = x + y
            del w
        r["profiled_add_bytes"] = [e.cpu_memory_usage for e in prof.events() if e.name == "aten::add"]
        out["default" if mib is None else str(mib)] = r
        torch.ops.skc.disable()
    return out


def scenario_hit(base):
    """One process of a pair: the model run recorded, compiled (or found in the cache), static."""
    torch.manual_seed(5)
    model, x = MODELS["encoder"](2, 8, 32)
    model.eval()
    stock = outputs(model, x)
    torch.ops.skc.enable(json.dumps({"base_dir": base}))
    outputs(model, x)
    report = json.loads(torch.ops.skc.compile())
    static = outputs(model, x)
    return {"report": report, "counters": counters(), "static_run": compare(static, stock)}


def scenario_shapes(base, batches):
    """One process: the encoder run at each batch size of `batches` (say "2,4"), recorded in one
    session, compiled (or covered by packages compiled before), then run static against stock."""
    torch.manual_seed(5)
    model, _ = MODELS["encoder"](2, 8, 32)
    model.eval()
    xs = [torch.randn(int(b), 8, 32) for b in batches.split(",")]
    stock = [outputs(model, x) for x in xs]
    torch.ops.skc.enable(json.dumps({"base_dir": base}))
    for x in xs:
        outputs(model, x)
    report = json.loads(torch.ops.skc.compile())
    before = static_calls()
    static = [outputs(model, x) for x in xs]
    return {"report": report, "static_calls": static_calls() - before,
            "equal": all(c["allclose"] for g, w in zip(static, stock) for c in compare(g, w).values())}


def static_calls():
    return sum(c["static"] for c in counters().values())


def same_as_stock(got, want):
    """What a static kernel owes stock torch: shape, strides, values within rtol 1e-4 and atol 1e-5,
    NaN and infinities in the same places, and zeros where stock has zeros, with their sign."""
    if got.shape != want.shape or got.stride() != want.stride() or got.dtype != want.dtype:
        return f"shape {tuple(got.shape)} strides {got.stride()} against {tuple(want.shape)} {want.stride()}"
    if not torch.equal(torch.isnan(got), torch.isnan(want)):
        return "NaN in other places"
    for sign in (1, -1):
        if not torch.equal(torch.isinf(got) & (got * sign > 0), torch.isinf(want) & (want * sign > 0)):
            return "infinities in other places"
    finite = torch.isfinite(want)
    if not torch.allclose(got[finite], want[finite], rtol=1e-4, atol=1e-5):
        return f"values differ by up to {(got[finite] - want[finite]).abs().max().item():.3g}"
    zero = want == 0
    if not (torch.equal(got[zero], want[zero]) and torch.equal(torch.signbit(got[zero]), torch.signbit(want[zero]))):
        return "zeros differ (value or sign)"
    return None


def scenario_special_values(base):
    """Calls whose answers stock torch defines off the finite path, or rejects: each is run stock,
    recorded, compiled with the rest, and run again; what differs from stock is reported."""
    import torch.nn.functional as F
    torch.manual_seed(3)
    inf, nan = float("inf"), float("nan")
    x = torch.randn(4, 16)
    x[0, :4] = torch.tensor([nan, -0.0, -inf, inf])
    g = torch.randn(4, 16) * 8
    g[0, :6] = torch.tensor([nan, -inf, inf, -0.0, -100.0, -1e30])
    finite = x.nan_to_num(0.0, 0.0, 0.0)
    mask = torch.zeros(4, 16)
    mask[:, 8:] = -inf
    mask[1, 4:8] = -1e9
    w, b = torch.randn(16, 24), torch.randn(24)
    a5 = torch.randn(5, 16)
    # NaN, infinities, signed zeros, large, subnormal, where silu's e^-x overflows, around tanh's
    # formulas' boundaries (0.625, 8.66).
    sv = torch.tensor([nan, -inf, inf, -0.0, 0.0, 1.0, -1.0, 100.0, -100.0, 1e30, -1e30, 1e-40, -1e-40, 0.5,
                       -2.0, 88.0, -88.0, -88.7, -89.0, 20.0, -20.0, 9.0, -9.0, 8.6, 1e-20, 0.625, -0.625])
    za = torch.tensor([-0.0, 0.0, -0.0, 0.0, inf, inf, -inf, 1.0, -1.0, 0.0, nan, 1e-40, 3.0, 1e30, -1e30])
    zb = torch.tensor([0.0, 0.0, -0.0, -0.0, inf, -inf, 2.0, 0.0, 0.0, -1.0, 1.0, 3.0, 1e-40, 1e-10, 1e10])
    # Gradients flowing back: mostly finite, with an infinity, a -0.0 and a large value (-0.0 and
    # inf times the derivatives' exact zeros give signed zeros and NaN, as stock's).
    dsv = torch.randn(sv.shape)
    dsv[[2, 6, 8, 16]] = torch.tensor([inf, -0.0, inf, 1e30])
    dmask = torch.randn(4, 16)
    dmask[2, 3] = inf

    def grad_of(fn, t, dy):
        t = t.clone().requires_grad_()
        return torch.autograd.grad(fn(t), t, dy)[0]

    # LayerNorm's three gradients (input, weight, bias: output_mask all true) of rows whose means are
    # large against their spread; one gradient row has an inf (NaN and infinities spread as stock's).
    lx = torch.randn(4, 16) + torch.tensor([[0.0], [100.0], [-30.0], [5.0]])
    lw, lb, ldy = torch.randn(16), torch.randn(16), torch.randn(4, 16)
    const_rows = torch.stack([torch.zeros(16), torch.full((16,), -0.0), torch.full((16,), 5.0), torch.randn(16)])
    ldy[1, 2], ldy[2, 5] = inf, -0.0

    def ln_grads_of(x_, w_=None, b_=None, wanted="xwb"):
        """LayerNorm's gradients of the tensors named by `wanted` (x, w, b; output_mask), of a layer
        with or without a weight and a bias."""
        x_, w_, b_ = (v if v is None else v.clone().requires_grad_(c in wanted) for v, c in ((x_, "x"), (w_, "w"),
                                                                                            (b_, "b")))
        ins = [v for v, c in ((x_, "x"), (w_, "w"), (b_, "b")) if c in wanted]
        return torch.cat([d.flatten() for d in torch.autograd.grad(F.layer_norm(x_, (16,), w_, b_), ins, ldy)])

    h, h4 = torch.randn(2, 5, 16), torch.randn(2, 3, 5, 16)  # [B, T, D], [B, H, T, D]
    c8, r16 = torch.randn(8, 1), torch.randn(1, 16)
    # mean: rows of 3 with NaN, infinities, an overflowing sum, -0.0 (stock gives +0.0), subnormals;
    # rows of 33 (vectors and a tail).
    m3 = torch.tensor([[1.0, nan, 2.0], [inf, -inf, 0.0], [inf, 1.0, 2.0], [3e38, 3e38, 0.0], [-0.0, -0.0, -0.0],
                       [1e-40, 1e-40, 1e-40], [-inf, -inf, 5.0], [-1e38, -3e38, -1e38], [0.1, 0.2, 0.3]])
    m33 = torch.randn(4, 3, 33)
    m33[0, 1, 7], m33[1, 2, 0], m33[2, 0, 32] = nan, inf, -inf
    # log_softmax: a row with -inf and -1e9 (masked), a row of -inf (NaN), NaN, +inf (NaN), values
    # whose differences overflow, -0.0; 5 columns (a tail) and 16 (rows in registers).
    ls5 = torch.tensor([[0.0, -inf, 1.0, -1e9, 2.0], [-inf] * 5, [1.0, nan, 2.0, 3.0, 4.0], [1.0, inf, 2.0, 3.0, 4.0],
                        [1e30, -1e30, 0.0, 3e38, -3e38], [-0.0, 0.0, -0.0, 0.0, 0.0], [-100.0, 0.0, 100.0, 87.0, -87.0]])
    ls16 = torch.randn(3, 16) * 4
    ls16[0, 3], ls16[0, 7], ls16[1] = -inf, -1e9, -inf
    ls16[1, 5] = 3.0
    # its backward: y a log_softmax output (with -inf and an e^y that is subnormal), dy with an inf, a
    # NaN and a row of -0.0 (stock sums it to -0.0: dx is +0.0).
    y5 = torch.log_softmax(torch.tensor([[0.0, -inf, 1.0, -1e9, 2.0], [1.0, 2.0, 3.0, 4.0, 5.0],
                                         [0.5, -0.5, 0.0, 1.0, -100.0], [1.0, 1.0, 1.0, 1.0, 1.0]]), -1)
    dy5 = torch.tensor([[1.0, 2.0, -0.0, 3.0, 0.5], [-0.0] * 5, [1.0, inf, 0.0, -1.0, 2.0], [nan, 0.0, 0.0, 0.0, 0.0]])
    xl, dl = torch.randn(6, 40) * 3, torch.randn(6, 40)
    xl[1, :20], dl[2, 4], dl[3] = -inf, inf, -0.0
    # cat, where and masked_fill copy bits: a NaN with a payload, -0.0, subnormals, infinities.
    payload = torch.tensor([0x7FC00123], dtype=torch.int32).view(torch.float32)
    pa = torch.cat([payload, torch.tensor([-0.0, 1e-40, -inf, 3.0])])
    pb = torch.tensor([0.0, nan, inf, -1e-40, -0.0])
    q = torch.randn(2, 5, 4, 8)  # [B, T, H, D]: rotary's rotate_half of slices of the last dim
    wt = torch.randn(6, 4)
    causal = torch.ones(5, 5, dtype=torch.bool).triu(1)
    s4 = torch.randn(2, 3, 5, 5)
    cond = torch.tensor([True, False, True, False, True])
    ds4 = torch.randn(s4.shape)
    # A mask broadcast along a middle dim (as masked_fill's backward passes it), rows of 8.
    mx, mm_ = torch.randn(5, 2, 8), torch.rand(5, 1, 8) < 0.5
    # [3, 1, 32] whose size-1 dim has stride 1 (a transpose of [3, 32, 1]): stock's output of an
    # elementwise op with a broadcast or a number takes that stride.
    odd = torch.randn(3, 32, 1).transpose(1, 2)
    # Products that underflow: fused multiply-adds round -1e-47 to -0.0; stock's BLAS stores +0.0.
    tiny, small = torch.full((4, 8), -1e-40), torch.full((8, 16), 1e-7)
    # LayerNorm rows beyond float's square-root range: a 1e30, a constant 2e19 row, a spread of 3e19
    # (stock's float moments overflow: NaN or 0 by the row), and a row within it.
    big = torch.randn(4, 16)
    big[0, 5], big[1], big[2] = 1e30, 2e19, torch.randn(16) * 3e19
    calls = {
        "relu NaN and -0.0": lambda: torch.relu(x),
        "relu_ NaN and -0.0": lambda: torch.relu_(x.clone()),
        "gelu tanh at -inf, -100, -1e30": lambda: F.gelu(g, approximate="tanh"),
        "gelu erf at -inf, -100, -1e30": lambda: F.gelu(g),
        "gelu erf of one element": lambda: F.gelu(torch.tensor([-100.0])),
        "softmax under a -inf and -1e9 mask": lambda: torch.softmax(finite + mask, -1),
        "fused relu epilogue keeps NaN": lambda: torch._addmm_activation(b, x, w),
        "fused gelu epilogue": lambda: torch._addmm_activation(b, g.nan_to_num(0.0, 0.0, 0.0), w, use_gelu=True),
        "times an integer above 2**53": lambda: finite * (2**60 + 2**36 + 1),
        "plus an integer above 2**53": lambda: finite + (2**60 + 2**36 + 1),
        # x2 an unfold view: strides (1, 1), N % 16 == 8, K % 8 == 0.
        "mm by an unfold view": lambda: torch.mm(a5, torch.arange(39.0).unfold(0, 24, 1)),
        "neg of special values": lambda: torch.neg(sv),
        "neg_ of special values": lambda: sv.clone().neg_(),
        "tanh of special values": lambda: torch.tanh(sv),
        "tanh_ of special values": lambda: sv.clone().tanh_(),
        "rsqrt of special values": lambda: torch.rsqrt(sv),
        "rsqrt_ of special values": lambda: sv.clone().rsqrt_(),
        "silu at -inf, -100, -89, -0.0": lambda: F.silu(sv),
        "silu_ at -inf, -100, -89, -0.0": lambda: F.silu(sv.clone(), inplace=True),
        "silu of one element": lambda: F.silu(torch.tensor([-inf])),
        **{f"pow {e} of special values": (lambda e=e: torch.pow(sv, e)) for e in (2, 3, 0.5, -0.5, -1, -2.0, 1, 0)},
        "pow_ 3 of special values": lambda: sv.clone().pow_(3),
        "sub of signed zeros and infinities": lambda: za - zb,
        "sub_ of signed zeros and infinities": lambda: za.clone().sub_(zb),
        "div of signed zeros and infinities": lambda: za / zb,
        "div_ of signed zeros and infinities": lambda: za.clone().div_(zb),
        "div with rounding_mode None": lambda: torch.div(za, zb, rounding_mode=None),
        "minus a number": lambda: za - 2,
        "divided by a number": lambda: za / 3,
        "divided by an integer above 2**53": lambda: finite / (2**60 + 2**36 + 1),
        "[B,T,1] * [B,T,D]": lambda: h[..., :1].contiguous() * h,
        "[B,T,D] / [B,T,1]": lambda: h / h[..., :1].contiguous(),
        "[T,D] - [B,H,T,D]": lambda: h[0] - h4,
        "[8,1] + [1,16]": lambda: c8 + r16,
        "[1,16] - [8,1]": lambda: r16 - c8,
        "[B,T,D] *= [B,1,D]": lambda: h.clone().mul_(h[:, :1].contiguous()),
        # Backward kernels through autograd: each must run its own static kernel (grad_types).
        "backward of relu at NaN, -0.0, infinities": lambda: grad_of(torch.relu, sv, dsv),
        "backward of gelu erf at special values": lambda: grad_of(F.gelu, sv, dsv),
        "backward of gelu tanh at special values": lambda: grad_of(lambda t: F.gelu(t, approximate="tanh"), sv, dsv),
        "backward of silu at special values": lambda: grad_of(F.silu, sv, dsv),
        "backward of softmax under a -inf and -1e9 mask": lambda: grad_of(lambda t: torch.softmax(t + mask, -1),
                                                                         finite, dmask),
        "backward of layer_norm, rows with large means, an inf and a -0.0 gradient": lambda: ln_grads_of(lx, lw, lb),
        "backward of layer_norm without weight and bias": lambda: ln_grads_of(lx, wanted="x"),
        "backward of layer_norm without weight and bias, constant rows": lambda: ln_grads_of(const_rows, wanted="x"),
        "backward of layer_norm with a weight only": lambda: ln_grads_of(lx, lw, wanted="xw"),
        "backward of layer_norm with a bias only": lambda: ln_grads_of(const_rows, None, lb, wanted="xb"),
        "backward of layer_norm, the weight's and bias's gradients only": lambda: ln_grads_of(lx, lw, lb, "wb"),
        "backward of layer_norm, the input's gradient only": lambda: ln_grads_of(lx, lw, lb, "x"),
        "mean of NaN, infinities, an overflow, -0.0, subnormals": lambda: m3.mean(-1),
        "mean over the last two dims, keepdim": lambda: m33.mean((-1, -2), keepdim=True),
        "mean over the last dim by its index": lambda: m33.mean(2),
        "mean of every element": lambda: torch.mean(m33),
        "mean of a 0-dim tensor": lambda: torch.tensor(-0.0).mean(),
        "log_softmax of -inf rows, NaN, +inf, overflowing differences": lambda: torch.log_softmax(ls5, -1),
        "log_softmax of rows in registers, -inf and -1e9": lambda: torch.log_softmax(ls16, 1),
        "log_softmax backward at an infinite gradient, -0.0 rows and NaN":
            lambda: torch._log_softmax_backward_data(dy5, y5, 1, torch.float32),
        "backward of log_softmax with -inf and an infinite gradient":
            lambda: grad_of(lambda t: torch.log_softmax(t, -1), xl, dl),
        "cat of a NaN payload, -0.0, subnormals": lambda: torch.cat([pa, pb]),
        "cat of three along dim 0": lambda: torch.cat([h[0], h[1], h4[0, 0]], 0),
        "cat of rotary's slices (a view)": lambda: torch.cat((-q[..., 4:], q[..., :4]), dim=-1),
        "cat of a transposed view": lambda: torch.cat([wt.t(), wt[:2].t()], -1),
        "where of a NaN payload, -0.0, subnormals": lambda: torch.where(cond, pa, pb),
        "where under a causal mask with -inf": lambda: torch.where(causal, -inf, s4),
        "where with a number": lambda: torch.where(cond, pa, 0.5),
        "masked_fill with -inf under a causal mask": lambda: s4.masked_fill(causal, -inf),
        "masked_fill with NaN": lambda: pa.masked_fill(cond, nan),
        "masked_fill with -0.0, mask broadcast along the last dim": lambda: s4.masked_fill(cond[:, None], -0.0),
        "masked_fill with an integer above 2**53": lambda: pa.masked_fill(cond, 2**60 + 2**36 + 1),
        "masked_fill with True": lambda: pa.masked_fill(cond, True),
        "masked_fill_ with -inf under a causal mask": lambda: s4.clone().masked_fill_(causal, -inf),
        "backward of masked_fill": lambda: grad_of(lambda t: t.masked_fill(causal, -inf), s4, ds4),
        "masked_fill with a mask broadcast along a middle dim": lambda: mx.masked_fill(mm_, 0.0),
        "where with a condition broadcast along a middle dim": lambda: torch.where(mm_, mx, -mx),
        "times a number, a size-1 dim of stride 1": lambda: odd * 2,
        "minus a row, a size-1 dim of stride 1": lambda: odd - r16.repeat(1, 2),
        "where of a size-1 dim of stride 1 and a number": lambda: torch.where(odd > 0, odd, 0.0),
        "mm of products that underflow to -0.0": lambda: torch.mm(tiny, small),
        "linear of products that underflow, a -0.0 bias": lambda: F.linear(tiny, small.t(), torch.full((16,), -0.0)),
        "bmm of products that underflow": lambda: torch.bmm(torch.full((2, 4, 8), -1e-40), torch.full((2, 8, 16), 1e-7)),
        "rows beyond float's square-root range through layer_norm": lambda: F.layer_norm(big, (16,), lw, lb),
        # Calls the plugin sees and leaves to stock (no error): these must run stock.
        "stock: mean over the first dim": lambda: m33.mean(0),
        "stock: mean of a transposed tensor": lambda: m33.transpose(1, 2).mean(-1),
        "stock: mean to float64": lambda: m33.mean(-1, dtype=torch.float64),
        "stock: log_softmax over the first dim": lambda: torch.log_softmax(ls16, 0),
        "stock: cat of channels-last tensors": lambda: torch.cat([s4.to(memory_format=torch.channels_last)] * 2, 1),
        "stock: cat with an empty tensor": lambda: torch.cat([pa, torch.ones(0)]),
        "stock: cat of a float64 tensor": lambda: torch.cat([pa, pb.double()]),
        "stock: where with a uint8 condition": lambda: torch.where(cond.to(torch.uint8), pa, pb),
        "masked_fill with a 0-dim tensor value": lambda: s4.masked_fill(causal, torch.tensor(-inf)),
        "masked_fill_ with a 0-dim tensor value": lambda: s4.clone().masked_fill_(causal, torch.tensor(nan)),
        # add and sub with alpha != 1 (Axpy: SGD's p.add_(grad, alpha=-lr)), rsub (1 - x).
        "add with alpha of signed zeros and infinities": lambda: torch.add(za, zb, alpha=-0.1),
        "add_ with alpha (SGD's step)": lambda: za.clone().add_(zb, alpha=-0.1),
        "sub with alpha": lambda: torch.sub(za, zb, alpha=2.5),
        "sub_ with an integer alpha": lambda: za.clone().sub_(zb, alpha=3),
        "[B,T,1] + alpha [B,T,D]": lambda: torch.add(h[..., :1].contiguous(), h, alpha=0.5),
        "add with alpha and a number": lambda: torch.add(za, 3.0, alpha=-2),
        "rsub of signed zeros and infinities": lambda: torch.rsub(za, zb),
        "rsub with alpha": lambda: torch.rsub(za, zb, alpha=0.5),
        "one minus a tensor": lambda: 1 - zb,
        "stock: masked_fill with a float64 tensor value":
            lambda: s4.masked_fill(causal, torch.tensor(-inf, dtype=torch.float64)),
        "stock: masked_fill of a transposed tensor": lambda: s4.transpose(2, 3).masked_fill(causal, -inf),
        # Elementwise ops of views (x has NaN, -0.0 and infinities in its first row): rotary
        # embedding's halves, a window of rows and columns, a step along the last dim.
        "neg of rotary's second half x[..., 8:]": lambda: -x[..., 8:],
        "rotate_half: cat of -x[..., 8:] and x[..., :8]": lambda: torch.cat((-x[..., 8:], x[..., :8]), -1),
        "tanh of a window x[1:, 2:]": lambda: torch.tanh(x[1:, 2:]),
        "relu of a slice x[..., 8:]": lambda: torch.relu(x[..., 8:]),
        "product of a step x[..., ::2] and a row": lambda: x[..., ::2] * finite[1, :8],
        "quotient of two halves": lambda: x[..., :8] / g[..., 8:],
        "stock: tanh of a transposed view (stock's output is transposed)": lambda: torch.tanh(x.t()),
        "stock: neg of a step along the last dim": lambda: -x[..., ::2],
        "stock: relu_ of a slice, in place": lambda: x.clone()[..., 8:].relu_(),
        # LayerNorm without a weight or a bias (elementwise_affine=False): stock's formula with ones
        # and zeros; rows of one value (and of zeros and -0.0) normalise to exact zeros.
        "LayerNorm without weight and bias": lambda: F.layer_norm(lx, (16,)),
        "LayerNorm without weight and bias of constant rows": lambda: F.layer_norm(const_rows, (16,)),
        "LayerNorm with a weight only": lambda: F.layer_norm(lx, (16,), lw),
        "LayerNorm with a bias only": lambda: F.layer_norm(const_rows, (16,), None, lb),
        "LayerNorm without weight and bias over two dims": lambda: F.layer_norm(lx.view(4, 2, 8), (2, 8)),
    }
    grad_types = {"backward of relu": "ReluGrad", "backward of gelu": "GeluGrad", "backward of silu": "SiluGrad",
                  "backward of log_softmax": "LogSoftmaxGrad", "backward of masked_fill": "MaskedFill",
                  "backward of softmax": "SoftmaxGrad", "backward of layer_norm": "LayerNormGradV3"}
    errors = {
        "layer_norm with a normalized_shape that is not the input's":
            lambda: F.layer_norm(torch.ones(6, 16), (3,), torch.ones(16), torch.zeros(16)),
        "add of mismatched names":
            lambda: torch.ones(2, 3, names=("N", "C")) + torch.ones(2, 3, names=("N", "D")),
        "bad: sub of shapes that do not broadcast": lambda: torch.ones(2, 3) - torch.ones(3, 2),
        "bad: div_ of a self smaller than the broadcast": lambda: torch.ones(1, 3).div_(torch.ones(2, 3)),
        "bad: sub with a bool tensor": lambda: torch.ones(3) - torch.ones(3, dtype=torch.bool),
        "bad: div with rounding_mode 'half'": lambda: torch.div(za, zb, rounding_mode="half"),
        "bad: pow of an integer tensor to -1": lambda: torch.pow(torch.arange(1, 4), -1),
        "bad: silu_ of an integer tensor": lambda: F.silu(torch.arange(3), inplace=True),
        "bad: mean of an integer tensor": lambda: torch.arange(3).mean(),
        "bad: mean over a dim named twice": lambda: m33.mean((2, -1)),
        "bad: mean over dim 3 of a 3-dim tensor": lambda: m33.mean(3),
        "bad: cat of shapes that differ": lambda: torch.cat([torch.ones(2, 3), torch.ones(3, 2)], 1),
        "bad: cat along dim 2 of matrices": lambda: torch.cat([torch.ones(2, 3), torch.ones(2, 3)], 2),
        "bad: log_softmax over dim 2 of a matrix": lambda: torch.log_softmax(ls16, 2),
        "bad: where with a float condition": lambda: torch.where(torch.ones(5), pa, pb),
        "bad: where of shapes that do not broadcast": lambda: torch.where(cond, pa, torch.ones(3)),
        "bad: masked_fill with a value beyond float's range": lambda: pa.masked_fill(cond, 1e300),
        "bad: add with a bool alpha": lambda: torch.add(za, zb, alpha=True),
        "bad: sub with an alpha beyond float's range": lambda: torch.sub(za, zb, alpha=1e300),
        "bad: rsub of a bool tensor": lambda: torch.rsub(torch.ones(3, dtype=torch.bool), 1),
        "bad: masked_fill_ with a mask bigger than self":
            lambda: pa.clone().masked_fill_(torch.ones(2, 5, dtype=torch.bool), 1.0),
    }
    names = lambda: (torch.ones(2, 3, names=("N", "C")) * 2).names  # noqa: E731

    def outcome(fn):
        try:
            return ("value", fn())
        except Exception as e:  # noqa: BLE001
            return ("error", type(e).__name__)

    stock = {k: outcome(f) for k, f in {**calls, **errors}.items()}
    torch.ops.skc.enable(json.dumps({"base_dir": base, "jobs": 2}))
    for f in {**calls, **errors}.values():
        outcome(f)
    names()
    report = json.loads(torch.ops.skc.compile())
    result = {}
    def ran(k):  # static calls of the call's own op type (a backward's forward ops run static too)
        t = next((t for prefix, t in grad_types.items() if k.startswith(prefix)), None)
        return static_calls() if t is None else counters().get(t, {}).get("static", 0)

    for k, f in {**calls, **errors}.items():
        before = ran(k)
        got = outcome(f)
        want = stock[k]
        if want[0] == "error" or got[0] == "error":
            diff = None if got == want else f"stock: {want}, static: {got[0]} {got[1] if got[0] == 'error' else ''}"
        else:
            diff = same_as_stock(got[1], want[1])
        result[k] = {"static": ran(k) > before, "differs": diff}
    return {"report": report, "calls": result, "names": list(names())}


def scenario_sessions(base, other_base):
    """Sessions after the first: after disable(), in another base, with a compiler that fails, and
    with nothing the host kernels can compile."""
    x = torch.randn(8, 16)

    def session(cfg, fn):
        torch.ops.skc.enable(json.dumps(cfg))
        fn()
        try:
            report = json.loads(torch.ops.skc.compile())
        except RuntimeError as e:
            return {"error": str(e)}
        before = counters()
        fn()
        ran = sorted(t for t, c in counters().items() if c["static"] > before.get(t, {"static": 0})["static"])
        return {"outcome": report["outcome"], "already_compiled": report["counts"]["already_compiled"],
                "compiled": report["counts"]["compiled"], "reused": report["counts"]["reused"],
                "packages": report["packages"], "not_recorded": report["not_recorded"], "key": report["key"],
                "static": bool(ran), "static_types": ran}

    out = {"first": session({"base_dir": base}, lambda: torch.relu(x))}
    torch.ops.skc.disable()
    out["after disable"] = session({"base_dir": base}, lambda: torch.relu(x))
    out["another base"] = session({"base_dir": other_base}, lambda: torch.relu(x))
    out["same base again"] = session({"base_dir": other_base}, lambda: torch.relu(x))
    # The set grows in the same process: the earlier op is not compiled again, its package is the
    # cover's part, and the set is keyed and recorded as a new process keys it.
    out["grown"] = session({"base_dir": other_base}, lambda: (torch.relu(x), torch.tanh(x)))
    torch.ops.skc.disable()
    out["failing compiler"] = session({"base_dir": base, "compiler": "/bin/false"}, lambda: torch.relu(x))
    torch.ops.skc.disable()

    def unsupported():  # softmax over the first of two dims; pow by an exponent the host does not compute
        return torch.softmax(x, 0), torch.pow(x[:, :1].contiguous().abs(), 1.5)

    want = unsupported()
    out["nothing compilable"] = session({"base_dir": base}, unsupported)
    out["nothing compilable"]["equal"] = all(torch.equal(a, b) for a, b in zip(unsupported(), want))
    return out


def scenario_accuracy(base):
    """Each static kernel's largest error against a float64 reference, beside stock torch's on the
    same input (cases named "stock: " must run stock): matrix products with K from 1,024 to 16,384
    (few outputs among them), LayerNorm, Softmax, LogSoftmax and mean rows up to 16,384 wide with
    large means, a LayerNorm over rows of 2^19, and means of rows up to 2^20 long."""
    import torch.nn.functional as F
    torch.manual_seed(11)
    cases = {}
    for k in (1024, 4096, 16384):
        for kind, make in (("randn", torch.randn), ("rand", torch.rand)):
            a, b = make(16, k), make(k, 48)
            cases[f"mm K={k} {kind}"] = (torch.mm, (a, b))
        w, bias = torch.randn(40, k), torch.randn(40)
        cases[f"linear K={k}"] = (F.linear, (torch.rand(8, k), w, bias))
        # op(B) transposed (packed blocks); all terms positive, so the blocked sums' rounding adds up.
        cases[f"linear K={k} rand"] = (F.linear, (torch.rand(16, k), torch.rand(48, k)))
        # Few outputs (the dot form): one element's error is one draw, so only the float nearest the
        # sum is sure to be within 2x of stock's on every draw.
        cases[f"mm [1, K] x [K, 1] K={k}"] = (torch.mm, (torch.randn(1, k), torch.randn(k, 1)))
        cases[f"mm [2, K] x [K, 1] K={k} rand"] = (torch.mm, (torch.rand(2, k), torch.rand(k, 1)))
        cases[f"linear [1, K] x [3, K]^T K={k}"] = (F.linear, (torch.randn(1, k), torch.randn(3, k), torch.randn(3)))
        cases[f"bmm K={k}"] = (torch.bmm, (torch.rand(2, 8, k), torch.rand(2, k, 24)))
        # Few outputs from A stored transposed: the host kernel would sum them in floats; stock runs.
        cases[f"stock: mm [K, 3]^T x [K, 2] K={k} rand"] = (torch.mm, (torch.rand(k, 3).t(), torch.rand(k, 2)))
    for width in (1024, 4096, 16384):
        for mean, std in ((1000.0, 0.01), (0.0, 1.0), (-300.0, 3.0)):
            x = mean + std * torch.randn(4, width)
            w, b = torch.randn(width), torch.randn(width)
            cases[f"layer_norm {width} mean {mean:g} std {std:g}"] = (
                lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b), (x, w, b))
            cases[f"softmax {width} mean {mean:g} std {std:g}"] = (lambda x: torch.softmax(x, -1), (x,))
            cases[f"log_softmax {width} mean {mean:g} std {std:g}"] = (lambda x: torch.log_softmax(x, -1), (x,))
            cases[f"mean {width} mean {mean:g} std {std:g}"] = (lambda x: x.mean(-1), (x,))
    # LayerNorm over rows of 2^19 (three dims: [32, 32, 512]): the first element is far from the mean
    # against the row's length, and the mean and its gradient must still be stock's to 2x.
    xl, wl, bl = torch.randn(2, 32, 32, 512), torch.randn(32, 32, 512), torch.randn(32, 32, 512)
    xl[:, 0, 0, 0] = 3.0
    cases["layer_norm over [32, 32, 512], x0 = 3"] = (lambda x, w, b: F.layer_norm(x, x.shape[1:], w, b), (xl, wl, bl))
    for rows, width in ((4096, 128), (2, 1 << 20)):  # RMSNorm's mean of squares; one long row
        x = torch.rand(rows, width) + 0.5
        cases[f"mean [{rows}, {width}] of values in [0.5, 1.5)"] = (lambda x: x.mean(-1), (x,))
    stock = {k: f(*a) for k, (f, a) in cases.items()}
    torch.ops.skc.enable(json.dumps({"base_dir": base, "jobs": 2}))
    for f, a in cases.values():
        f(*a)
    report = json.loads(torch.ops.skc.compile())
    out = {}
    for k, (f, a) in cases.items():
        before = static_calls()
        got = f(*a)
        ran = static_calls() > before
        ref = f(*[t.double() for t in a])
        scale = ref.abs().max().item()
        out[k] = {"static": ran, "static_err": (got.double() - ref).abs().max().item(),
                  "stock_err": (stock[k].double() - ref).abs().max().item(), "scale": scale}
    return {"report": report, "cases": out}


def main():
    name, args = sys.argv[1], sys.argv[2:]
    if name != "bad_configs":
        torch.ops.load_library(PLUGIN)
    result = {"model": scenario_model, "bad_configs": scenario_bad_configs, "hit": scenario_hit,
              "shapes": scenario_shapes,
              "special_values": scenario_special_values, "sessions": scenario_sessions,
              "accuracy": scenario_accuracy, "output_cache": scenario_output_cache}[name](*args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
