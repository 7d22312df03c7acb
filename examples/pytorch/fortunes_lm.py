#!/usr/bin/python3
"""A hippo trainer for a small transformer language model in PyTorch: characters of Debian's
`fortunes` text (the corpus of hippo's own gpt: worker/engine/text_data.h), GPT-2's layout (pre-norm
blocks of causal self-attention and a GELU MLP, a final layer norm, the output layer tied to the
token embedding), trained by AdamW. Settings: fixed.layers, heads, dim, context, batch_size,
weight_decay; lr may follow any schedule (a warm-up, then a decay).

Data: data.train_samples windows of context + 1 characters of the training split (window i starts
at character i * context), data.eval_samples windows of the evaluation split; data.dir is the
fortunes directory (default /usr/share/games/fortunes). Metrics: loss (nats per character) and
accuracy (of the next character) on the evaluation windows.
"""
import math
import os

import torch
from torch import nn

import hippo

FILES = ["computers", "fortunes", "humorists", "literature", "science", "wisdom", "work"]
VOCAB = 96  # '\n' is 0, the printable ASCII characters ' ' to '~' are 1 to 95
_corpora = {}


def token(byte):
    if byte == 10:
        return 0
    if byte == 9:
        byte = 32  # a tab reads as a space
    return byte - 31 if 32 <= byte <= 126 else None


def read_corpus(directory):
    """(train, eval) token tensors: every tenth fortune is held out for evaluation; each fortune
    is followed by the line "%"."""
    if directory in _corpora:
        return _corpora[directory]
    splits, fortune, current = ([], []), 0, []

    def finish():
        nonlocal fortune, current
        if current:
            splits[1 if fortune % 10 == 9 else 0].extend(current + [token(ord("%")), 0])
            fortune, current = fortune + 1, []
    for name in FILES:
        with open(os.path.join(directory, name), "rb") as f:
            text = f.read()
        lines = text.split(b"\n")
        if text.endswith(b"\n"):
            lines.pop()
        for line in lines:
            if line == b"%":
                finish()
            else:
                current += [t for t in map(token, line) if t is not None] + [0]
        finish()  # a file's last fortune
    _corpora[directory] = tuple(torch.tensor(s, dtype=torch.long) for s in splits)
    return _corpora[directory]


def windows(tokens, context, count):
    """(inputs, targets) of the first `count` windows of context + 1 tokens."""
    if count > (len(tokens) - 1) // context:
        raise SystemExit(f"fortunes_lm: {count} windows of {context} are more than the text has")
    starts = torch.arange(count) * context
    rows = tokens[starts[:, None] + torch.arange(context + 1)]
    return rows[:, :-1], rows[:, 1:]


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, mask):
        h = self.norm1(x)
        x = x + self.attention(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class LanguageModel(nn.Module):
    def __init__(self, layers, heads, dim, context):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, dim)
        nn.init.normal_(self.embedding.weight, 0.0, 0.02)  # as GPT-2 (it is the output layer too)
        self.position = nn.Parameter(torch.randn(context, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        mask = torch.triu(torch.full((context, context), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, tokens):
        x = self.embedding(tokens) + self.position[:tokens.shape[1]]
        for block in self.blocks:
            x = block(x, self.mask)
        return self.norm(x) @ self.embedding.weight.t()  # the output layer is the embedding


@torch.no_grad()
def evaluate(model, inputs, targets, batch=16):
    loss, correct = 0.0, 0
    for i in range(0, len(inputs), batch):
        logits = model(inputs[i:i + batch])
        loss += nn.functional.cross_entropy(logits.reshape(-1, VOCAB),
                                            targets[i:i + batch].reshape(-1),
                                            reduction="sum").item()
        correct += (logits.argmax(-1) == targets[i:i + batch]).sum().item()
    return {"loss": loss / targets.numel(), "accuracy": correct / targets.numel()}


def train(stage):
    hippo.deterministic()  # the worker's --threads; on a GPU, its deterministic kernels
    f = stage.fixed
    train_text, eval_text = read_corpus(stage.data.get("dir", "/usr/share/games/fortunes"))
    x, y = (t.to(stage.device) for t in windows(train_text, f["context"],
                                                stage.data["train_samples"]))
    x_eval, y_eval = (t.to(stage.device) for t in windows(eval_text, f["context"],
                                                          stage.data["eval_samples"]))
    torch.manual_seed(hippo.mix(stage.seed, 0x1417) & ((1 << 63) - 1))
    model = LanguageModel(f["layers"], f["heads"], f["dim"], f["context"]).to(stage.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0,
                                  weight_decay=f.get("weight_decay", 0.0))
    state = hippo.torch_state(model=model, optimizer=optimizer)
    stage.restore(state.load)
    batches = hippo.BatchSampler(len(x), f["batch_size"], stage.seed)
    for step in stage.steps(evaluate=lambda: evaluate(model, x_eval, y_eval), save=state.save):
        for group in optimizer.param_groups:
            group["lr"] = stage.value("lr", step)
        rows = batches(step)
        logits = model(x[rows])
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y[rows].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if not math.isfinite(loss.item()):
            raise SystemExit(f"fortunes_lm: the loss diverged at step {step}")
        optimizer.step()


if __name__ == "__main__":
    hippo.serve(train)
