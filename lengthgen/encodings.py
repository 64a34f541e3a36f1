"""Positional encodings behind one small interface.

Each encoding can touch attention in up to three places, and does nothing in the others:

* ``add(length)``: rows added to the token embeddings at positions 0..L-1 (APE, sinusoidal);
* ``rotate(x, positions)``: a rotation of queries and keys by their position (RoPE);
* ``bias(q_pos, k_pos)``: an additive bias on the attention logits (ALiBi).

Shapes: S ensemble members, L positions, d model width. Positions are 0-indexed integers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from .config import Config


@dataclass(frozen=True)
class EncodingTraits:
    """What the rest of the package knows about an encoding without building it (one home for all of it)."""

    label: str  # its name in figures and tables
    color: str  # its colour in every figure
    translation_invariant: bool  # logits depend on positions only through i - j: one kernel row serves every length
    learned_table: bool  # a learned row per position (APE): max_length rows, none past them


TRAITS = {  # keyed by the value of Config.encoding; this order is the order of every listing and palette
    "rope": EncodingTraits("RoPE", "#1f77b4", translation_invariant=True, learned_table=False),
    "ape": EncodingTraits("APE (learned)", "#d62728", translation_invariant=False, learned_table=True),
    "sinusoidal": EncodingTraits("sinusoidal", "#2ca02c", translation_invariant=False, learned_table=False),
    "nope": EncodingTraits("NoPE", "#7f7f7f", translation_invariant=True, learned_table=False),
    "alibi": EncodingTraits("ALiBi", "#9467bd", translation_invariant=True, learned_table=False),
}
ENCODINGS = tuple(TRAITS)  # the values Config.encoding accepts


def stacked_normal(gens: list[torch.Generator], shape: tuple[int, ...], std: float) -> torch.Tensor:
    """One N(0, std^2) tensor per generator, stacked: shape (len(gens), *shape)."""
    return torch.stack([torch.randn(shape, generator=g) * std for g in gens])


def rope_frequencies(dim: int, base: float) -> torch.Tensor:
    """theta_p = base^(-2p/d) for the d/2 rotation pairs p = 0..d/2-1, shape (d/2,), float64."""
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def rope_rotate(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotate each pair (x_2p, x_2p+1) by the angle position * theta_p.

    x: (..., n, d); positions: (n,) integers aligned with x's second-to-last axis. Returns x's shape.
    Angles are formed in float64 so that long positions keep their precision.
    """
    angles = positions.to(torch.float64)[:, None] * rope_frequencies(x.shape[-1], base).to(positions.device)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def sinusoidal_table(length: int, dim: int) -> torch.Tensor:
    """The fixed sin/cos table of Vaswani et al.: shape (length, dim)."""
    angles = torch.arange(length, dtype=torch.float64)[:, None] * rope_frequencies(dim, 10000.0)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2).float()


class Encoding(nn.Module):
    """No positional information (NoPE); the base of the others."""

    name = "nope"

    def add(self, length: int) -> torch.Tensor | None:
        """Additive rows for positions 0..length-1: (S or 1, length, d), or None."""
        return None

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Position-dependent rotation of queries/keys x: (..., n, d) -> same shape."""
        return x

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        """Additive attention-logit bias (len(q_pos), len(k_pos)), or None."""
        return None


class RoPE(Encoding):
    name = "rope"

    def __init__(self, base: float):
        super().__init__()
        self.base = base

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return rope_rotate(x, positions, self.base)


class LearnedAbsolute(Encoding):
    """A learned table of ``max_length`` rows; only rows of positions seen in training get gradient."""

    name = "ape"

    def __init__(self, gens: list[torch.Generator], max_length: int, dim: int, std: float):
        super().__init__()
        self.table = nn.Parameter(stacked_normal(gens, (max_length, dim), std))

    def add(self, length: int) -> torch.Tensor:
        if length > self.table.shape[1]:
            raise ValueError(f"length {length} is past the APE table ({self.table.shape[1]} rows)")
        return self.table[:, :length]


class Sinusoidal(Encoding):
    name = "sinusoidal"

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.register_buffer("anchor", torch.zeros(()), persistent=False)  # follows .to(device)

    def add(self, length: int) -> torch.Tensor:
        return sinusoidal_table(length, self.dim)[None].to(self.anchor.device)


class ALiBi(Encoding):
    """Linear bias -slope * (i - j): a fixed, monotone preference for recent keys."""

    name = "alibi"

    def __init__(self, slope: float):
        super().__init__()
        self.slope = slope

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        return -self.slope * (q_pos[:, None] - k_pos[None, :]).to(torch.float32)


def build_encoding(c: Config, gens: list[torch.Generator]) -> Encoding:
    """The encoding named by ``c.encoding`` (APE draws its table from ``gens``, one per member)."""
    if c.encoding == "rope":
        return RoPE(c.rope_base)
    if c.encoding == "ape":
        return LearnedAbsolute(gens, c.max_length, c.dim, c.embed_std)
    if c.encoding == "sinusoidal":
        return Sinusoidal(c.dim)
    if c.encoding == "alibi":
        return ALiBi(c.alibi_slope)
    return Encoding()


__all__ = [
    "ALiBi",
    "ENCODINGS",
    "Encoding",
    "EncodingTraits",
    "LearnedAbsolute",
    "RoPE",
    "Sinusoidal",
    "TRAITS",
    "build_encoding",
    "rope_frequencies",
    "rope_rotate",
    "sinusoidal_table",
    "stacked_normal",
]
