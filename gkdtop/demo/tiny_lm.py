"""The demo's tiny language models, the tensor helpers they share, and torch itself, imported quietly.

Student, rollout and teacher are each a next-token MLP over the previous two tokens, a few thousand
parameters, so that a real distillation step runs on two CPU cores in milliseconds. torch is
imported only when a model is built or used: importing this module (the driver does) must not wait
on it.
"""

from __future__ import annotations

import warnings
from typing import Any


def quiet_torch() -> Any:
    """Import torch without its 'NumPy is missing' warning in every worker, one thread per process."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*NumPy.*")
        import torch
    torch.set_num_threads(1)
    return torch


def build_lm(vocab: int, dim: int, hidden: int, seed: int, sharpness: float = 1.0) -> Any:
    """A next-token model over the previous two tokens: embed, concat, MLP. A few thousand parameters."""
    torch = quiet_torch()
    from torch import nn

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Embedding(vocab, dim), nn.Flatten(start_dim=-2), nn.Linear(2 * dim, hidden),
                          nn.Tanh(), nn.Linear(hidden, vocab))
    if sharpness != 1.0:
        with torch.no_grad():
            model[-1].weight.mul_(sharpness)
            model[-1].bias.mul_(sharpness)
    return model


def contexts(tokens: Any) -> Any:
    """[B, L] tokens -> [B, L, 2] (previous, current) pairs; position t predicts token t+1."""
    torch = quiet_torch()
    prev = torch.cat([torch.zeros_like(tokens[:, :1]), tokens[:, :-1]], dim=1)
    return torch.stack([prev, tokens], dim=-1)


def response_logprobs(model: Any, seqs: Any, prompt_len: int) -> Any:
    """Log-probs over the vocabulary at the positions that predict the response tokens: [B, G, V]."""
    torch = quiet_torch()
    logits = model(contexts(seqs))[:, prompt_len - 1:-1]
    return torch.log_softmax(logits.float(), dim=-1)
