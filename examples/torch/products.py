"""The matrix products of the example models, one call at a time: stock torch against skc's static
kernels (skc_torch), alternating in one process.

For each of a few shapes (`linear` with a bias, `mm`, and the weight gradient dY^T X, whose first
operand is stored transposed) the script records the calls in one session, compiles once, and then
for --rounds rounds times every call stock (plugin disabled) and static (a new session on the same
base: a cache hit), the median of --calls calls each. It prints, per call, the median static time
and the median over the rounds of stock / static (and its range): above 1, static is faster.

One thread (torch and OpenBLAS). Stock's products are OpenBLAS's; which of its kernels run is
OPENBLAS_CORETYPE's choice (docs/torch.md: Debian's 0.3.21 runs its SSE3 kernels on CPUs it does
not know):

    OPENBLAS_CORETYPE=SkylakeX PYTHONPATH=build/gcc/python /usr/bin/python3 examples/torch/products.py
"""
import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import skc_torch  # noqa: E402


def cases(shapes):
    torch.manual_seed(0)
    out = []
    for m, k, n in shapes:
        x, w, b, wt = torch.randn(m, k), torch.randn(n, k), torch.randn(n), torch.randn(k, n)
        dy, xx = torch.randn(m, n), torch.randn(m, k)
        out.append((f"linear [{m},{k}] x [{n},{k}]^T + b", lambda x=x, w=w, b=b: F.linear(x, w, b)))
        out.append((f"mm [{m},{k}] x [{k},{n}]", lambda x=x, wt=wt: torch.mm(x, wt)))
        out.append((f"mm dY^T X [{n},{m}]^T x [{m},{k}]", lambda dy=dy, xx=xx: torch.mm(dy.t(), xx)))
    return out


def median_us(fn, calls):
    fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--base", default=None, help="skc's base folder (default: a new temporary one)")
    ap.add_argument("--shape", type=int, nargs=3, action="append", metavar=("M", "K", "N"),
                    help="x [M, K], weight [N, K] (repeat for more; default: the example models' shapes)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    base = args.base or tempfile.mkdtemp(prefix="skc-products-")
    # A BERT-like model's, a LLaMA-like model's, and a vocabulary's logits (and their gradients).
    shapes = args.shape or [(256, 512, 512), (256, 512, 2048), (256, 2048, 512), (256, 512, 1376),
                            (256, 1376, 512), (256, 512, 32000)]
    calls = list(dict(cases(shapes)).items())  # one entry per distinct name
    with skc_torch.recording({"base_dir": base}) as session:
        for _, fn in calls:
            fn()
        session.compile()
    skc_torch.disable()
    ratios = {name: [] for name, _ in calls}
    static = {name: [] for name, _ in calls}
    for _ in range(args.rounds):
        stock = {name: median_us(fn, args.calls) for name, fn in calls}
        with skc_torch.recording({"base_dir": base}) as session:
            for name, fn in calls:
                fn()
            session.compile()  # the same calls: a cache hit
            for name, fn in calls:
                t = median_us(fn, args.calls)
                static[name].append(t)
                ratios[name].append(stock[name] / t)
        skc_torch.disable()
    for name, _ in calls:
        r = ratios[name]
        print(f"{name:38s} static {statistics.median(static[name]):9.0f} us  stock/static "
              f"{statistics.median(r):.2f}  ({min(r):.2f} to {max(r):.2f})")


if __name__ == "__main__":
    main()
