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
    return {"errors": errors, "good_report": report, "entries": sorted(os.listdir(base))}


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


def main():
    name, args = sys.argv[1], sys.argv[2:]
    if name != "bad_configs":
        torch.ops.load_library(PLUGIN)
    result = {"model": scenario_model, "bad_configs": scenario_bad_configs, "hit": scenario_hit}[name](*args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
