"""One frozen settings object for a run, and the checks that say what to change.

A single flat dataclass (instead of separate task / model / training objects) keeps three
things simple: command-line flags map one-to-one onto fields, a sweep grid is a dict of field
names, and a cache key is the dataclass as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

ENCODINGS = ("rope", "ape", "sinusoidal", "nope", "alibi")
OPTIMIZERS = ("adam", "gd")  # Adam (AdamW's decoupled decay), plain gradient descent (no momentum)
DECAY_SCOPES = ("matrices", "all")  # weight decay on the attention/read-out matrices only, or on the tables too


class ConfigError(ValueError):
    """Bad settings. The message always says which setting to change and to what."""


@dataclass(frozen=True)
class Config:
    """Everything that defines one experiment (apart from the seeds).

    Task: tokens i.i.d. uniform over ``vocab`` symbols, query at the last position, target the token
    ``offset`` positions back. Training sequences have length ``train_length``, or a length drawn
    uniformly from ``[min_train_length, train_length]`` at every step when ``min_train_length`` is set.
    """

    # task
    vocab: int = 16
    train_length: int = 32
    offset: int = 2
    min_train_length: int | None = None
    # model
    encoding: str = "rope"
    dim: int = 32
    layers: int = 1
    residual: bool = True
    mlp: bool = False
    rope_base: float = 10000.0
    alibi_slope: float = 0.5
    max_length: int = 1024
    init_scale: float = 1.0
    # training
    optimizer: str = "adam"
    steps: int = 400
    batch: int = 256
    lr: float = 1e-2
    weight_decay: float = 0.0
    decay_scope: str = "matrices"
    target_accuracy: float | None = 0.995
    length_seed: int = 0

    def __post_init__(self) -> None:
        validate(self)

    @property
    def chance(self) -> float:
        """Accuracy of a uniform guess: 1/V."""
        return 1.0 / self.vocab

    @property
    def embed_std(self) -> float:
        """Initial std of token embeddings and APE rows: init_scale / sqrt(dim), so a row has norm ~init_scale."""
        return self.init_scale / math.sqrt(self.dim)

    @property
    def lengths(self) -> tuple[int, int]:
        """(shortest, longest) training length."""
        return (self.min_train_length or self.train_length, self.train_length)

    def replace(self, **changes: object) -> "Config":
        """A copy with some fields changed (validated again)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ConfigError(f"unknown setting(s) {sorted(unknown)}; known: {field_names()}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def recipe(self) -> str:
        """The training recipe in one line, e.g. "Adam, lr 0.01, batch 256, <= 400 steps, early stop at 0.995"."""
        name = {"adam": "Adam", "gd": "GD"}[self.optimizer]
        stop = "no early stop" if self.target_accuracy is None else f"early stop at {self.target_accuracy:g}"
        steps = f"{self.steps} steps" if self.target_accuracy is None else f"<= {self.steps} steps"
        decay = "no weight decay" if self.weight_decay == 0 else (
            f"weight decay {self.weight_decay:g} on " + ("the matrices" if self.decay_scope == "matrices" else "every parameter"))
        return f"{name}, lr {self.lr:g}, batch {self.batch}, {steps}, {stop}, {decay}"

    def key(self) -> str:
        """A stable text key (sorted JSON) for caches."""
        return json.dumps(self.to_dict(), sort_keys=True)


def field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(Config)]


def validate(c: Config) -> None:
    """Raise ConfigError with a fix for the first problem found."""
    if c.encoding not in ENCODINGS:
        raise ConfigError(f"unknown encoding {c.encoding!r}; use one of {', '.join(ENCODINGS)}")
    if c.optimizer not in OPTIMIZERS:
        raise ConfigError(f"unknown optimizer {c.optimizer!r}; use one of {', '.join(OPTIMIZERS)}")
    if c.decay_scope not in DECAY_SCOPES:
        raise ConfigError(f"unknown decay_scope {c.decay_scope!r}; use one of {', '.join(DECAY_SCOPES)}")
    if c.vocab < 2:
        raise ConfigError(f"vocab={c.vocab}: the vocabulary needs at least 2 symbols (set vocab >= 2)")
    if c.train_length < 1:
        raise ConfigError(f"train_length={c.train_length}: a length must be at least 1")
    if c.min_train_length is not None and not 1 <= c.min_train_length <= c.train_length:
        raise ConfigError(
            f"min_train_length={c.min_train_length} must lie in [1, train_length={c.train_length}]"
        )
    shortest = c.lengths[0]
    if c.offset < 1:
        raise ConfigError(f"offset={c.offset}: the offset K must be at least 1 (the token K back)")
    if c.offset >= shortest:
        raise ConfigError(
            f"offset={c.offset} must be below the shortest training length ({shortest}): "
            f"the target x_(L-K) must exist; lower the offset or raise the training length"
        )
    if c.dim < 2 or c.dim % 2:
        raise ConfigError(f"dim={c.dim}: use an even width >= 2 (RoPE rotates pairs of dimensions)")
    if c.layers < 1:
        raise ConfigError(f"layers={c.layers}: use at least 1 layer")
    if c.encoding == "ape" and c.max_length < c.train_length:
        raise ConfigError(
            f"max_length={c.max_length} is below train_length={c.train_length}: "
            f"the APE table needs a row for every training position"
        )
    if c.steps < 0 or c.batch < 1:
        raise ConfigError(f"steps={c.steps}, batch={c.batch}: use steps >= 0 and batch >= 1")
    if c.lr <= 0 or c.weight_decay < 0:
        raise ConfigError(f"lr={c.lr}, weight_decay={c.weight_decay}: use lr > 0, weight_decay >= 0")
    if c.init_scale <= 0:
        raise ConfigError(f"init_scale={c.init_scale}: use a positive scale (1.0: embedding rows of norm ~1)")
    if c.rope_base <= 1:
        raise ConfigError(f"rope_base={c.rope_base}: use a base above 1 (10000 is standard)")
    if c.target_accuracy is not None and not 0 < c.target_accuracy <= 1:
        raise ConfigError(f"target_accuracy={c.target_accuracy}: use a value in (0, 1] or None")


def check_length(c: Config, length: int) -> None:
    """Raise ConfigError unless the model can be run at sequence length ``length``."""
    if length < 1:
        raise ConfigError(f"length {length}: an evaluation length must be at least 1")
    if length <= c.offset:
        raise ConfigError(
            f"length {length}: at offset K={c.offset} the length must exceed K (the target x_(L-K) must exist)"
        )
    if c.encoding == "ape" and length > c.max_length:
        raise ConfigError(
            f"length {length} is past the APE table ({c.max_length} rows); "
            f"evaluate at <= {c.max_length} or train with a larger max_length"
        )
