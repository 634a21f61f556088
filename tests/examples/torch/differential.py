"""What the plugin's differential tests (test_opinfo.py, test_probe.py) share: exact copies of a
sample's tensors, the outcome of a call, and the comparison of a static kernel's outcome with
stock torch's.

A result agrees when it has the same shape, dtype and strides, is allclose (rtol 1e-4, atol 1e-5,
equal_nan), has NaN, +inf and -inf at the same positions, and is exactly zero with the same sign
bit where stock is exactly zero. An exception agrees when it has the same type (a different
message is a note, not a mismatch).
"""
import json

import torch

RTOL, ATOL = 1e-4, 1e-5


def map_tree(x, fn):
    """x with every tensor t replaced by fn(t), through lists, tuples and dicts."""
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, list):
        return [map_tree(y, fn) for y in x]
    if isinstance(x, tuple):
        return tuple(map_tree(y, fn) for y in x)
    if isinstance(x, dict):
        return {k: map_tree(v, fn) for k, v in x.items()}
    return x


def tensors_of(x):
    out = []
    map_tree(x, lambda t: out.append(t) or t)
    return out


class Copier:
    """Copies tensors with their exact layout (storage, offset, sizes, strides): each distinct
    storage is copied once, so tensors of one sample that share memory (a view, an expanded
    tensor, an out= overlapping an input) still do in the copy. The copies are leaf tensors."""

    def __init__(self):
        self.storages = {}

    def __call__(self, t):
        t = t.detach()
        st = t.storage()
        if st.size() == 0:  # nothing to share (torch 1.13 clones an empty bool storage as a float one)
            return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype)
        key = (st.data_ptr(), t.dtype)
        if key not in self.storages:
            self.storages[key] = st.clone()
        return torch.empty(0, dtype=t.dtype).set_(self.storages[key], t.storage_offset(), t.size(), t.stride())


def describe(x):
    """A short text of a value: tensors as dtype[shape] with strides (and offset if any)."""
    if isinstance(x, torch.Tensor):
        s = f"{str(x.dtype).replace('torch.', '')}{list(x.shape)}"
        if x.dim() and not x.is_contiguous():
            s += f" stride={list(x.stride())}"
        elif x.dim():
            s += f" (contiguous {list(x.stride())})"
        if x.storage_offset():
            s += f" offset={x.storage_offset()}"
        if x.numel() and x.numel() <= 4:
            s += f" values={x.tolist()}"
        return s
    if isinstance(x, list):
        return "[" + ", ".join(describe(y) for y in x) + "]"
    if isinstance(x, tuple):
        return "(" + ", ".join(describe(y) for y in x) + ("," if len(x) == 1 else "") + ")"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k}: {describe(v)}" for k, v in x.items()) + "}"
    return repr(x)


class Outcome:
    def __init__(self, value=None, exc=None):
        self.value = value
        self.exc = exc  # (type name, message) or None


def static_total():
    return sum(c.get("static", 0) for c in json.loads(torch.ops.skc.counters()).values())


def positions(mask, limit=3):
    idx = mask.nonzero()
    return int(idx.shape[0]), [tuple(int(i) for i in row) for row in idx[:limit]]


def at(t, pos):
    v = t[pos].item() if t.dim() else t.item()
    return repr(v) if isinstance(v, float) and v == 0 and str(v).startswith("-") else v


def compare_tensor(stock, static, where, inputs):
    """The differences of one tensor result, as texts (empty when they agree)."""
    diffs = []
    if tuple(stock.shape) != tuple(static.shape):
        return [f"{where}: shape stock {list(stock.shape)} vs static {list(static.shape)}"]
    if stock.dtype != static.dtype:
        return [f"{where}: dtype stock {stock.dtype} vs static {static.dtype}"]
    if tuple(stock.stride()) != tuple(static.stride()):
        diffs.append(f"{where}: strides stock {list(stock.stride())} vs static {list(static.stride())}")
    s, t = stock.detach(), static.detach()
    # Input tensors of the output's shape, to show their values at a differing position.
    same_shape = [(i, x) for i, x in enumerate(inputs) if tuple(x.shape) == tuple(s.shape) and s.dim()]

    def show(mask, what):
        n, first = positions(mask)
        ex = []
        for p in first:
            e = f"{list(p)}: stock {at(s, p)} static {at(t, p)}"
            for i, x in same_shape:
                e += f" input{i} {at(x.detach(), p)}"
            ex.append(e)
        diffs.append(f"{where}: {what} at {n} of {s.numel()} positions, e.g. " + "; ".join(ex))

    if s.is_complex():  # real and imaginary parts as a last dimension of 2
        s, t = torch.view_as_real(s), torch.view_as_real(t)
        same_shape = []
    if not s.is_floating_point():
        if not torch.equal(s, t):
            show(s != t, "values differ")
        return diffs
    if not torch.allclose(t, s, rtol=RTOL, atol=ATOL, equal_nan=True):
        finite = torch.isfinite(s) & torch.isfinite(t)
        absdiff = torch.where(finite, (t.double() - s.double()).abs(), torch.zeros((), dtype=torch.float64))
        mad = float(absdiff.max()) if absdiff.numel() else 0.0
        close = torch.isclose(t, s, rtol=RTOL, atol=ATOL, equal_nan=True)
        show(~close, f"not allclose (max abs diff over finite {mad:.6g})")
    if not torch.equal(torch.isnan(s), torch.isnan(t)):
        show(torch.isnan(s) != torch.isnan(t), "NaN positions differ")
    if not torch.equal(torch.isposinf(s), torch.isposinf(t)):
        show(torch.isposinf(s) != torch.isposinf(t), "+inf positions differ")
    if not torch.equal(torch.isneginf(s), torch.isneginf(t)):
        show(torch.isneginf(s) != torch.isneginf(t), "-inf positions differ")
    zero = s == 0
    bad_zero = zero & ((t != 0) | (torch.signbit(t) != torch.signbit(s)))
    if bool(bad_zero.any()):
        show(bad_zero, "stock exact zero, static not the same zero (value or sign bit)")
    return diffs


def compare_values(stock, static, where, inputs):
    if isinstance(stock, torch.Tensor):
        if not isinstance(static, torch.Tensor):
            return [f"{where}: stock a tensor, static {type(static).__name__}"]
        return compare_tensor(stock, static, where, inputs)
    if isinstance(stock, (list, tuple)):
        if not isinstance(static, (list, tuple)) or len(stock) != len(static):
            return [f"{where}: stock {describe(stock)} vs static {describe(static)}"]
        diffs = []
        for i, (a, b) in enumerate(zip(stock, static)):
            diffs += compare_values(a, b, f"{where}[{i}]", inputs)
        return diffs
    if stock is None or static is None:
        return [] if stock is None and static is None else [f"{where}: stock {stock!r} vs static {static!r}"]
    try:
        equal = bool(stock == static)
    except Exception:  # noqa: BLE001
        equal = False
    return [] if equal else [f"{where}: stock {stock!r} vs static {static!r}"]


def compare_outcomes(stock, static, where, inputs):
    """(differences, note): the differences make a mismatch; the note is a different message only."""
    if stock.exc is not None:
        if static.exc is None:
            return [f"{where}: stock raised {stock.exc[0]}: {stock.exc[1][:300]!r}; static returned "
                    f"{describe(static.value)[:300]}"], None
        if static.exc[0] != stock.exc[0]:
            return [f"{where}: stock raised {stock.exc[0]}: {stock.exc[1][:300]!r}; static raised "
                    f"{static.exc[0]}: {static.exc[1][:300]!r}"], None
        if static.exc[1] != stock.exc[1]:
            return [], f"{where}: both raised {stock.exc[0]}, messages differ: stock {stock.exc[1][:300]!r}, " \
                       f"static {static.exc[1][:300]!r}"
        return [], None
    if static.exc is not None:
        return [f"{where}: stock returned {describe(stock.value)[:300]}; static raised {static.exc[0]}: "
                f"{static.exc[1][:300]!r}"], None
    return compare_values(stock.value, static.value, where, inputs), None
