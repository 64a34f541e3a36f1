"""One frozen settings object for a run, and the checks that say what to change.

A single flat dataclass (instead of separate task / model / training objects) keeps three
things simple: command-line flags map one-to-one onto fields, a sweep grid is a dict of field
names, and a cache key is the dataclass as JSON.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import numbers
import os
from dataclasses import dataclass

from .encodings import ENCODINGS, TRAITS
from .optim import RULES

DTYPES = ("float32", "float64")  # the dtype of the model, its tables and the optimiser
DECAY_SCOPES = ("matrices", "all")  # weight decay on the attention/read-out matrices only, or on the tables too


class ConfigError(ValueError):
    """Bad settings. The message always says which setting to change and to what."""


@dataclass(frozen=True)
class Config:
    """Everything that defines one experiment (apart from the seeds).

    Task: tokens i.i.d. uniform over ``vocab`` symbols, query at the last position, target the token
    ``offset`` positions back. Training sequences have length ``train_length``, or a length drawn
    uniformly from ``[min_train_length, train_length]`` at every step when ``min_train_length`` is set.

    Training: ``optimizer`` is an update rule of ``optim.RULES``. ``train_set=None`` draws a fresh batch of
    ``batch`` sequences at every step; ``train_set=N`` draws a fixed training set of N sequences per member
    once (from the member's seed) and every step uses all of it (full batch): ``batch`` must then equal N,
    so that everything that reads ``batch`` (the memory estimate, the recipe) reads the batch really used.
    ``dtype`` ("float32" or "float64") is the dtype of the model, its tables and the optimiser.
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
    train_set: int | None = None
    dtype: str = "float32"

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
        name = OPTIMIZER_NAMES[self.optimizer]
        stop = "no early stop" if self.target_accuracy is None else f"early stop at {self.target_accuracy:g}"
        steps = f"{self.steps} steps" if self.target_accuracy is None else f"<= {self.steps} steps"
        decay = "no weight decay" if self.weight_decay == 0 else (
            f"weight decay {self.weight_decay:g} on " + ("the matrices" if self.decay_scope == "matrices" else "every parameter"))
        data = f"batch {self.batch}" if self.train_set is None else f"a fixed training set of {self.train_set} (full batch)"
        precision = "" if self.dtype == "float32" else f", {self.dtype}"
        return f"{name}, lr {self.lr:g}, {data}, {steps}, {stop}, {decay}{precision}"

    def key(self) -> str:
        """A stable text key (sorted JSON) for caches."""
        return json.dumps(self.to_dict(), sort_keys=True)


# Each update rule of optim.RULES in words (Config.recipe).
OPTIMIZER_NAMES = {"adam": "Adam", "gd": "GD", "ngd": "normalised GD", "sign": "sign descent",
                   "signum": "Signum (sign descent with momentum)"}


def field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(Config)]


INT_FIELDS = ("vocab", "train_length", "offset", "dim", "layers", "max_length", "steps", "batch", "length_seed")
BOOL_FIELDS = ("residual", "mlp")
FLOAT_FIELDS = ("rope_base", "alibi_slope", "init_scale", "lr", "weight_decay", "target_accuracy")
STR_FIELDS = ("encoding", "optimizer", "decay_scope", "dtype")


def _check_types(c: Config) -> None:
    """Every field has its type (an int where a tensor shape is made, a finite float for every float)."""
    for name in INT_FIELDS + ("min_train_length", "train_set"):
        value = getattr(c, name)
        if name in ("min_train_length", "train_set") and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ConfigError(f"{name}={value!r}: give a whole number (an int), e.g. {name}={getattr(Config, name)!r}")
    for name in BOOL_FIELDS:
        if not isinstance(getattr(c, name), bool):
            raise ConfigError(f"{name}={getattr(c, name)!r}: give True or False")
    for name in STR_FIELDS:
        if not isinstance(getattr(c, name), str):
            raise ConfigError(f"{name}={getattr(c, name)!r}: give a name (a string)")
    for name in FLOAT_FIELDS:
        value = getattr(c, name)
        if name == "target_accuracy" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ConfigError(f"{name}={value!r}: give a number, e.g. {name}={getattr(Config, name)!r}")
        if not math.isfinite(value):
            raise ConfigError(f"{name}={value}: give a finite number (not nan or inf), e.g. {name}={getattr(Config, name)!r}")


def validate(c: Config) -> None:
    """Raise ConfigError with a fix for the first problem found."""
    _check_types(c)
    if c.encoding not in ENCODINGS:
        raise ConfigError(f"unknown encoding {c.encoding!r}; use one of {', '.join(ENCODINGS)}")
    if c.optimizer not in RULES:
        raise ConfigError(f"unknown optimizer {c.optimizer!r}; use one of {', '.join(RULES)}")
    if c.dtype not in DTYPES:
        raise ConfigError(f"unknown dtype {c.dtype!r}; use one of {', '.join(DTYPES)}")
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
    if TRAITS[c.encoding].learned_table and c.max_length < c.train_length:
        raise ConfigError(
            f"max_length={c.max_length} is below train_length={c.train_length}: "
            f"the APE table needs a row for every training position"
        )
    if c.max_length < 1:
        raise ConfigError(f"max_length={c.max_length}: the APE table needs at least 1 row (default {Config.max_length})")
    if c.steps < 0 or c.batch < 1:
        raise ConfigError(f"steps={c.steps}, batch={c.batch}: use steps >= 0 and batch >= 1")
    if c.lr <= 0:
        raise ConfigError(f"lr={c.lr}: use a positive step size, e.g. lr={Config.lr}")
    if c.weight_decay < 0:
        raise ConfigError(f"weight_decay={c.weight_decay}: use weight_decay >= 0 (0: no decay)")
    if c.init_scale <= 0:
        raise ConfigError(f"init_scale={c.init_scale}: use a positive scale (1.0: embedding rows of norm ~1)")
    if c.rope_base <= 1:
        raise ConfigError(f"rope_base={c.rope_base}: use a base above 1 (10000 is standard)")
    if c.alibi_slope <= 0:
        raise ConfigError(f"alibi_slope={c.alibi_slope}: use a positive slope (default {Config.alibi_slope}); "
                          f"for no position bias use encoding='nope'")
    if c.target_accuracy is not None and not 0 < c.target_accuracy <= 1:
        raise ConfigError(f"target_accuracy={c.target_accuracy}: use a value in (0, 1] or None")
    if c.length_seed < 0:
        raise ConfigError(f"length_seed={c.length_seed}: use a seed >= 0")
    if c.train_set is not None:
        if c.train_set < 1:
            raise ConfigError(f"train_set={c.train_set}: a fixed training set needs at least 1 sequence "
                              f"(or train_set=None for a fresh batch every step)")
        if c.batch != c.train_set:
            raise ConfigError(f"train_set={c.train_set} with batch={c.batch}: every step uses the whole fixed "
                              f"training set (full batch); set batch={c.train_set} too")
        if c.min_train_length is not None:
            raise ConfigError(f"train_set={c.train_set} with min_train_length={c.min_train_length}: a fixed "
                              f"training set has one length; set min_train_length=None")
    check_memory(c)


def check_length(c: Config, length: int, members: int = 1, samples: int | None = None) -> None:
    """Raise ConfigError unless the model can be run at sequence length ``length`` (and its tensors for
    ``members`` ensemble members and ``samples`` held-out sequences fit in memory: ``check_memory``)."""
    if isinstance(length, bool) or not isinstance(length, numbers.Integral):
        raise ConfigError(f"length {length!r}: an evaluation length is a whole number (an int)")
    if length < 1:
        raise ConfigError(f"length {length}: an evaluation length must be at least 1")
    if length <= c.offset:
        raise ConfigError(
            f"length {length}: at offset K={c.offset} the length must exceed K (the target x_(L-K) must exist)"
        )
    if TRAITS[c.encoding].learned_table and length > c.max_length:
        raise ConfigError(
            f"length {length} is past the APE table ({c.max_length} rows); "
            f"evaluate at <= {c.max_length} or train with a larger max_length"
        )
    check_memory(c, members, length=length, samples=EVAL_SAMPLES if samples is None else samples)


def check_samples(samples: int) -> None:
    """Raise ConfigError unless ``samples`` (held-out sequences per evaluation length) is a whole number >= 1."""
    if isinstance(samples, bool) or not isinstance(samples, numbers.Integral):
        raise ConfigError(f"samples={samples!r}: give a whole number of held-out sequences, e.g. 1000")
    if samples < 1:
        raise ConfigError(f"samples={samples}: evaluate on at least 1 held-out sequence (e.g. 1000)")


# Memory: an estimate of the largest tensors a run allocates, checked before anything is allocated.
INDEX_BYTES = 8  # int64 tokens and indices (floats take Config.dtype's size: float_bytes)
EVAL_SAMPLES = 1000  # held-out sequences per evaluation length (the default of lengthgen.evaluate)
EVAL_CHUNK = 2**25  # largest activation per evaluation chunk, in elements (evaluate.forward_chunks' budget)
MEMORY_FRACTION = 0.8  # a run may use this share of the machine's memory
MEMORY_ENV = "LENGTHGEN_MEMORY_LIMIT"  # bytes (e.g. 8e9, or 8G / 512M): overrides the limit


def eval_chunk(members: int, length: int, dim: int, one_layer: bool, budget: int = EVAL_CHUNK) -> int:
    """Sequences per evaluation chunk, so that the largest activation stays under ``budget`` elements: S*b*L on
    the one-layer tables, else S*b*L*d, or the S*b*L*L attention once L > d (``evaluate.forward_chunks``; the
    memory check counts the same)."""
    per_sequence = members * length if one_layer else members * length * max(length, dim)
    return max(1, budget // per_sequence)


def usable_cores() -> int:
    """The CPU cores this process may use (its affinity where the platform has one, else the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@functools.lru_cache(maxsize=1)
def physical_memory() -> int | None:
    """Bytes of memory this process can use: the machine's RAM, or a smaller cgroup (container) limit."""
    sizes = []
    try:
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            sizes.append(int(text))
    return min(sizes) if sizes else None


def parse_bytes(text: str) -> int:
    """'8e9', '8G', '512M', '64K' -> bytes."""
    text = text.strip().upper().removesuffix("B")
    scale = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(text[-1:], 1)
    number = text[:-1] if scale > 1 else text
    try:
        value = float(number) * scale
    except ValueError:
        raise ConfigError(f"{MEMORY_ENV}={text!r}: give bytes, e.g. 8e9 or 8G") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{MEMORY_ENV}={text!r}: give a positive number of bytes, e.g. 8G")
    return int(value)


def memory_limit() -> int | None:
    """The most bytes a run may need: $LENGTHGEN_MEMORY_LIMIT, else MEMORY_FRACTION of physical_memory()
    (None when neither is known: no check)."""
    if os.environ.get(MEMORY_ENV):
        return parse_bytes(os.environ[MEMORY_ENV])
    total = physical_memory()
    return None if total is None else int(MEMORY_FRACTION * total)


def memory_terms(c: Config, members: int = 1, length: int | None = None,
                 samples: int = EVAL_SAMPLES) -> dict[str, tuple[int, tuple[str, ...]]]:
    """The largest allocations of a run, as {what: (bytes, the settings that make it large)}.

    ``length=None``: training ``members`` ensemble members at the training length (parameters with their
    gradients and Adam moments, activations kept for the backward pass, the per-step loss and accuracy).
    ``length=L``: evaluating them at length L on ``samples`` held-out sequences (no gradients; sequences in chunks like
    ``evaluate.forward_chunks``). A one-layer model runs on vocabulary tables (``tables.py``):
    a (S, V, V, L) logit table and (S, V, L, d) keys; deeper models run on (S, B, L, d) activations and
    (S, B, L, L) attention in every layer below the last. Rough (a small multiple of the largest tensors),
    meant to catch sizes that cannot fit, not to budget exactly.
    """
    S, V, d, n = int(members), int(c.vocab), int(c.dim), int(c.layers)
    F, I = float_bytes(c), INDEX_BYTES
    training = length is None
    L = c.train_length if training else int(length)
    copies = 4 if training else 1  # a parameter, its gradient and Adam's two moments
    matrices = n * d * d * (4 + (8 if c.mlp else 0))
    terms = {
        "token tables (vocab x dim)": (S * 2 * V * d * F * copies, ("vocab", "dim")),
        "attention matrices (layers x dim x dim)": (S * matrices * F * copies, ("dim", "layers")),
    }
    if TRAITS[c.encoding].learned_table:
        terms["APE table (max_length x dim)"] = (S * c.max_length * d * F * copies, ("max_length", "dim"))
    if training:
        batch, f_act = c.batch, 2  # forward value and gradient
        # the loss (in the model's dtype) and accuracy (float32) of every step, kept for the whole budget
        terms["training history (steps)"] = (S * c.steps * (F + 4), ("steps",))
    else:
        batch, f_act = min(int(samples), eval_chunk(S, L, d, one_layer=n == 1)), 1
        terms["held-out tokens (samples x length)"] = (int(samples) * L * I, ("samples", "the evaluation length"))
    what = "train_length" if training else "the evaluation length"
    rows = "batch" if training else "samples"
    if n == 1:
        terms["logit table (vocab x vocab x length)"] = (S * V * V * L * F * (f_act + 1), ("vocab", what))
        terms["keys (vocab x length x dim)"] = (S * V * L * d * F * 2 * (f_act + 1), ("vocab", "dim", what))
        terms["attention (batch x length)"] = (S * batch * L * (2 * I + F * 2 * f_act), (rows, what))
    else:
        mlp = 4 if c.mlp else 0
        terms["activations (batch x length x dim)"] = (
            S * batch * L * d * F * n * (4 + mlp) * f_act, (rows, "dim", "layers", what))
        # every layer below the last: scores, masked scores and softmax (and in training their gradients)
        terms["attention (batch x length x length)"] = (
            S * batch * L * L * F * (n - 1) * (4 if training else 3), (rows, "layers", what))
    if S > 1:
        terms = {k: (b, (*names, "the number of seeds")) for k, (b, names) in terms.items()}
    return terms


def float_bytes(c: Config) -> int:
    """Bytes of one parameter or activation: 4 in float32, 8 in float64."""
    return 8 if c.dtype == "float64" else 4


def estimate_bytes(c: Config, members: int = 1, length: int | None = None, samples: int = EVAL_SAMPLES) -> int:
    """Rough peak bytes of training ``members`` members of ``c`` (``length=None``) or of evaluating them
    at ``length`` on ``samples`` sequences (see ``memory_terms``)."""
    return sum(b for b, _ in memory_terms(c, members, length, samples).values())


def format_bytes(n: float) -> str:
    """Bytes in decimal units: 1.06 MB, 20.2 GB."""
    for unit in ("B", "KB", "MB", "GB", "TB", "PB", "EB", "ZB"):
        if n < 1000 or unit == "ZB":
            return f"{int(n)} B" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} ZB"


def check_memory(c: Config, members: int = 1, length: int | None = None, samples: int = EVAL_SAMPLES,
                 limit: int | None = None) -> None:
    """Raise ConfigError (one line: the size, the limit, the largest tensor and what to lower) when
    ``estimate_bytes`` exceeds ``limit`` (default ``memory_limit()``). Call it before allocating."""
    limit = memory_limit() if limit is None else limit
    if limit is None:
        return
    terms = memory_terms(c, members, length, samples)
    total = sum(b for b, _ in terms.values())
    if total <= limit:
        return
    what, (biggest, names) = max(terms.items(), key=lambda kv: kv[1][0])
    lower = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    if length is None:
        run = f"training {members} member(s) with vocab={c.vocab}, dim={c.dim}, layers={c.layers}, " \
              f"train_length={c.train_length}, batch={c.batch}"
    else:
        run = f"evaluating {members} member(s) with vocab={c.vocab}, dim={c.dim}, layers={c.layers} " \
              f"at length {length} on {samples} samples"
    raise ConfigError(
        f"{run} needs about {format_bytes(total)}, over the memory limit {format_bytes(limit)} "
        f"(${MEMORY_ENV} sets it); the largest part is the {what}, {format_bytes(biggest)}: lower {lower}"
    )
