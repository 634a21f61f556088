#!/usr/bin/python3
"""A LLaMA-like decoder on skc's static kernels (skc_torch), checked and timed against stock torch.

The model: a token embedding; N decoder blocks, each
    h = x + attention(rmsnorm(x));  out = h + mlp(rmsnorm(h))
with RMSNorm written out as x * rsqrt(mean(x^2, last dim) + eps) * weight, rotary position
embedding on q and k (x * cos + rotate_half(x) * sin, rotate_half from slices, neg and cat),
multi-head causal self-attention (q @ k^T / sqrt(head_dim) plus an additive mask that is -inf
above the diagonal, softmax, @ v) and a SiLU-gated MLP down(silu(gate(x)) * up(x)); a final
RMSNorm, an LM head and log_softmax. No Linear has a bias. The training loss is nll_loss of
the next token.

How it is run, checked and timed, and how the static share is measured: model_run.py.

    PYTHONPATH=build/gcc/python /usr/bin/python3 examples/torch/llama.py --base /tmp/skc-torch
    PYTHONPATH=build/gcc/python SKC_TORCH_VERBOSE=1 /usr/bin/python3 examples/torch/llama.py --base /tmp/skc-torch --json

skc_torch is imported from Python's path (in the build tree: PYTHONPATH=build/gcc/python);
SKC_TORCH_VERBOSE=1 makes the plugin print why calls are unsupported.

Exit status: 0 success; 1 a check failed (results differ from stock, or no static call);
2 bad usage.
"""
import math
import sys

import model_run  # noqa: E402  (sets the thread counts before torch is imported)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402


# ---- the model -----------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    """(x1, x2) -> (-x2, x1) along the last dim, its two halves."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary(nn.Module):
    """Rotary position embedding of a [batch, seq, heads, head_dim] tensor."""

    def __init__(self, head_dim, max_seq, theta=10000.0):
        super().__init__()
        freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angle = torch.outer(torch.arange(max_seq, dtype=torch.float64), freq)
        angle = torch.cat((angle, angle), dim=-1)  # [seq, head_dim]: the halves share the frequencies
        self.register_buffer("cos", angle.cos().float()[:, None, :].contiguous(), persistent=False)
        self.register_buffer("sin", angle.sin().float()[:, None, :].contiguous(), persistent=False)

    def forward(self, x):
        n = x.shape[1]
        return x * self.cos[:n] + rotate_half(x) * self.sin[:n]


class Attention(nn.Module):
    def __init__(self, dim, heads, max_seq):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.rotary = Rotary(self.head_dim, max_seq)
        self.register_buffer("causal", torch.full((max_seq, max_seq), float("-inf")).triu(1), persistent=False)

    def forward(self, x):
        b, n, dim = x.shape
        q = self.rotary(self.wq(x).view(b, n, self.heads, self.head_dim)).transpose(1, 2)
        k = self.rotary(self.wk(x).view(b, n, self.heads, self.head_dim)).transpose(1, 2)
        v = self.wv(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        causal = self.causal if n == self.causal.shape[0] else self.causal[:n, :n].contiguous()
        probs = torch.softmax(scores + causal, dim=-1)
        return self.wo((probs @ v).transpose(1, 2).reshape(b, n, dim))


class GatedMLP(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, dim, heads, hidden, max_seq, eps):
        super().__init__()
        self.attn_norm = RMSNorm(dim, eps)
        self.attn = Attention(dim, heads, max_seq)
        self.mlp_norm = RMSNorm(dim, eps)
        self.mlp = GatedMLP(dim, hidden)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    def __init__(self, vocab, dim, layers, heads, hidden, max_seq, eps=1e-6):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, hidden, max_seq, eps) for _ in range(layers))
        self.norm = RMSNorm(dim, eps)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        return F.log_softmax(self.lm_head(self.norm(h)), dim=-1)


def build(args):
    """The model, its inputs, and the phases: name -> (prepare, body) factories."""
    model = Llama(args.vocab, args.hidden, args.layers, args.heads, args.ffn, args.seq)
    with torch.no_grad():  # RMSNorm weights other than 1, so that their gradients matter
        for m in model.modules():
            if isinstance(m, RMSNorm):
                m.weight.add_(0.1 * torch.randn_like(m.weight))
    tokens = torch.randint(args.vocab, (args.batch, args.seq + 1))
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def loss_of(logp):
        return F.nll_loss(logp.reshape(-1, logp.shape[-1]), targets.reshape(-1))

    def forward():
        return model(inputs)

    description = (f"LLaMA-like decoder: vocab {args.vocab}, hidden {args.hidden}, {args.layers} layers, "
                   f"{args.heads} heads, MLP {args.ffn}; tokens [{args.batch}, {args.seq}]")
    return model, forward, loss_of, description


def check_args(ap, args):
    if args.hidden % args.heads or (args.hidden // args.heads) % 2:
        ap.error("--hidden must be a multiple of --heads, with an even head size")


if __name__ == "__main__":
    sys.exit(model_run.main(__doc__, build, 1376, "the gated MLP's inner width", check_args=check_args,
                            inference_checked="log-probs"))
