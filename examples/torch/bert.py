#!/usr/bin/python3
"""A BERT-like encoder on skc's static kernels (skc_torch), checked and timed against stock torch.

The model: token plus position embeddings and a LayerNorm; N pre-norm encoder layers, each
    h = x + attention(layernorm(x), mask);  out = h + ffn(layernorm(h))
with explicit multi-head self-attention (q, k, v projections with biases, (q @ k^T) * 1/sqrt(d)
plus an additive mask of -1e9 at the padding positions of each sequence, softmax, @ v, an output
projection) and ffn = Linear, GELU (erf), Linear; a final LayerNorm; a tanh pooler over the first
token (Linear + tanh) and a classifier head (Linear). The batch's sequences have different
lengths (the first is full, each next one a quarter shorter, down to a quarter), padded with
token 0. Inference returns the logits and the final hidden states; the training loss is
cross_entropy of the logits against random labels.

How it is run, checked and timed, and how the static share is measured: model_run.py.

    PYTHONPATH=build/gcc/python /usr/bin/python3 examples/torch/bert.py --base /tmp/skc-torch
    PYTHONPATH=build/gcc/python SKC_TORCH_VERBOSE=1 /usr/bin/python3 examples/torch/bert.py --base /tmp/skc-torch --json

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


class SelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def split(self, t, b, n):
        return t.view(b, n, self.heads, self.head_dim).transpose(1, 2)  # [b, heads, n, head_dim]

    def forward(self, x, additive_mask):
        b, n, dim = x.shape
        q, k, v = self.split(self.query(x), b, n), self.split(self.key(x), b, n), self.split(self.value(x), b, n)
        scores = (q @ k.transpose(-2, -1)) * self.scale + additive_mask
        probs = torch.softmax(scores, dim=-1)
        return self.out((probs @ v).transpose(1, 2).reshape(b, n, dim))


class EncoderLayer(nn.Module):
    """Pre-norm: the LayerNorms come before attention and the feed-forward block."""

    def __init__(self, dim, heads, ffn, eps):
        super().__init__()
        self.attn_norm = nn.LayerNorm(dim, eps=eps)
        self.attn = SelfAttention(dim, heads)
        self.ffn_norm = nn.LayerNorm(dim, eps=eps)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn), nn.GELU(), nn.Linear(ffn, dim))

    def forward(self, x, additive_mask):
        x = x + self.attn(self.attn_norm(x), additive_mask)
        return x + self.ffn(self.ffn_norm(x))


class Bert(nn.Module):
    def __init__(self, vocab, dim, layers, heads, ffn, max_positions, classes, eps=1e-12):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(max_positions, dim)
        self.embed_norm = nn.LayerNorm(dim, eps=eps)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads, ffn, eps) for _ in range(layers))
        self.final_norm = nn.LayerNorm(dim, eps=eps)
        self.pooler = nn.Linear(dim, dim)
        self.classifier = nn.Linear(dim, classes)
        self.register_buffer("position_ids", torch.arange(max_positions)[None, :], persistent=False)

    def forward(self, tokens, attention_mask):
        """tokens [b, n] (int64); attention_mask [b, n], 1.0 at real tokens and 0.0 at padding.
        Returns the logits [b, classes] and the hidden states [b, n, dim]."""
        n = tokens.shape[1]
        h = self.embed_norm(self.tokens(tokens) + self.positions(self.position_ids[:, :n]))
        additive_mask = (1.0 - attention_mask[:, None, None, :]) * -1e9  # [b, 1, 1, n]: 0 or -1e9
        for layer in self.layers:
            h = layer(h, additive_mask)
        h = self.final_norm(h)
        pooled = torch.tanh(self.pooler(h[:, 0]))
        return self.classifier(pooled), h


def build(args):
    """The model, the forward call on its inputs, the loss of its output, and a description."""
    model = Bert(args.vocab, args.hidden, args.layers, args.heads, args.ffn, args.seq, args.classes)
    with torch.no_grad():  # LayerNorm weights and biases other than 1 and 0, so that their gradients matter
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.add_(0.1 * torch.randn_like(m.weight))
                m.bias.add_(0.1 * torch.randn_like(m.bias))
    lengths = [max(1, args.seq - (i % 4) * args.seq // 4) for i in range(args.batch)]
    attention_mask = torch.zeros(args.batch, args.seq)
    tokens = torch.randint(1, args.vocab, (args.batch, args.seq))
    for i, length in enumerate(lengths):
        attention_mask[i, :length] = 1.0
        tokens[i, length:] = 0  # padding
    labels = torch.randint(args.classes, (args.batch,))

    def loss_of(logits):
        return F.cross_entropy(logits, labels)

    def forward():
        return model(tokens, attention_mask)

    description = (f"BERT-like encoder: vocab {args.vocab}, hidden {args.hidden}, {args.layers} pre-norm layers, "
                   f"{args.heads} heads, FFN {args.ffn}, {args.classes} classes; tokens [{args.batch}, {args.seq}], "
                   f"lengths {lengths}")
    return model, forward, loss_of, description


def extra_args(ap):
    ap.add_argument("--classes", type=int, default=3)


def check_args(ap, args):
    if args.hidden % args.heads:
        ap.error("--hidden must be a multiple of --heads")


if __name__ == "__main__":
    sys.exit(model_run.main(__doc__, build, 2048, "the feed-forward block's inner width", extra_args=extra_args,
                            check_args=check_args, inference_checked="logits and hidden states"))
