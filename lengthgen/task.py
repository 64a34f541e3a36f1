"""Fixed-offset retrieval: read a sequence, output the token K positions before the last one.

Positions are 1-indexed in the text (x_1 .. x_L, target x_(L-K)) and 0-indexed in tensors
(index L-1 is the query, index L-1-K the target).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from .config import Config
from .draws import randint_

# Independent random streams, so that changing one use of randomness never shifts another.
STREAM_INIT, STREAM_TRAIN, STREAM_EVAL, STREAM_LENGTHS = 0, 1, 2, 3


def generator(*key: int) -> torch.Generator:
    """A CPU torch generator seeded from a tuple of integers (e.g. (seed, stream))."""
    state = np.random.SeedSequence([int(k) for k in key]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def sample_tokens(vocab: int, batch: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """Uniform i.i.d. tokens, shape (batch, length), int64."""
    return torch.randint(vocab, (batch, length), generator=gen)


def target_index(length: int, offset: int | torch.Tensor) -> int | torch.Tensor:
    """The 0-indexed position of the target in a sequence of ``length`` tokens at offset K: L-1-K (elementwise
    for a tensor of offsets, one per ensemble member)."""
    return length - 1 - offset


def targets(tokens: torch.Tensor, offset: int) -> torch.Tensor:
    """The token K back from the last position: tokens[..., L-1-K], shape tokens.shape[:-1]."""
    return tokens[..., target_index(tokens.shape[-1], offset)]


def eval_tokens(c: Config, length: int, samples: int, seed: int = 0) -> torch.Tensor:
    """Held-out evaluation tokens, shape (samples, length); never drawn by training streams."""
    return sample_tokens(c.vocab, samples, length, generator(seed, STREAM_EVAL, length))


class TrainStream:
    """Training batches for an ensemble: member s draws from its own seeded stream.

    ``next()`` returns tokens of shape (S, batch, L). With variable-length training every member
    gets the same L at a step, drawn from a stream seeded by ``config.length_seed``, so a member of an
    ensemble sees exactly the data it would see when trained alone. With ``config.train_set = N`` each
    member's N sequences are drawn once (they are the first batch its stream would draw) and every
    ``next()`` returns them again: full-batch training on a fixed set.
    """

    def __init__(self, c: Config, seeds: list[int]):
        self.c = c
        self.gens = [generator(s, STREAM_TRAIN) for s in seeds]
        self.length_gen = generator(c.length_seed, STREAM_LENGTHS)
        self.fixed = None if c.train_set is None else self.draw(self.gens, c.train_length)  # (S, N, L)

    def next_length(self) -> int:
        lo, hi = self.c.lengths
        if lo == hi:
            return hi
        return int(torch.randint(lo, hi + 1, (1,), generator=self.length_gen))

    def next(self, members: Sequence[int] | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
        """The next batch: tokens (S, batch, L), or (len(members), batch, L) for the given members only. Each
        member draws exactly what it draws in a full batch (its own generator); the length stream advances once.
        ``out``: the previous batch, no longer needed, to draw into where it has the shape (``draw``)."""
        if self.fixed is not None:  # the same tensor while every member trains (no copy a step)
            rows = None if members is None else [int(m) for m in members]
            return self.fixed if rows is None or rows == list(range(len(self.fixed))) else self.fixed[rows]
        gens = self.gens if members is None else [self.gens[m] for m in members]
        return self.draw(gens, self.next_length(), out)

    def draw(self, gens: list[torch.Generator], length: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """One batch per generator: tokens (len(gens), batch, length), into ``out`` where it has that shape (int64,
        contiguous). Reusing the memory matters: a fresh batch of 10 x 1024 x 32 tokens (2.6 MB) is fresh pages
        from the system every step, and writing them cost some 150 us per member, five times the draws themselves
        (measured)."""
        shape = (len(gens), self.c.batch, length)
        reuse = out is not None and tuple(out.shape) == shape and out.dtype == torch.long and out.is_contiguous()
        # on ``out``'s memory, but a new tensor: a batch is known by its identity (TableStep.forward indexes a fixed
        # training set, passed as the same tensor every step, once)
        tokens = out.view(shape) if reuse else torch.empty(shape, dtype=torch.long)
        for row, g in zip(tokens, gens):
            randint_(row, self.c.vocab, g)  # = sample_tokens, in place (torch.randint's numbers, drawn compiled)
        return tokens
