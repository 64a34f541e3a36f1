"""The carrier kernel: the position part of the first layer's attention logit, as a function of offset.

For the query at the last position i = L-1 and a key at i + delta (delta <= 0), the first layer's
logit is bilinear in the two layer inputs h_q = E[x_q] (+ row_i) and h_k = E[x_k] (+ row_(i+delta)).
With x_q and x_k independent and uniform over the vocabulary, the mean logit is the same bilinear
form applied to the mean inputs: that mean is the carrier kernel c(delta). It is exact (no sampling)
and defined at every offset, including offsets never seen in training. At delta = 0 the query and key
are the same token, so c(0) is a formal value there; ``logit_table`` gives the true self logit.

For RoPE, c(delta) = sum_p A_p cos(delta theta_p - phi_p), one cosine per rotation pair p: the pair
spectrum. Translation-invariant encodings (RoPE, NoPE, ALiBi) give a kernel that does not depend on
the length; absolute ones (APE, sinusoidal) depend on the query's position, passed as ``length``.

Shapes: S ensemble members, V vocabulary, d width, n offsets, P = d/2 rotation pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from .config import ConfigError
from .encodings import TRAITS, rope_frequencies
from .model import Model

TOP_PAIRS = (1, 2, 4)
BEYOND_MULTIPLE = 16  # default reach of beyond-window searches: 16 x the training length


def check_first_layer(layer: int) -> None:
    """The kernel needs token-level layer inputs, which only the first layer has."""
    if layer != 0:
        raise ConfigError(
            f"layer={layer}: the carrier kernel is defined on the first layer (layer=0), whose input is the "
            f"token embedding plus position rows; deeper inputs depend on context: measure their attention "
            f"with pinning.measure_lengths (attention by layer) instead"
        )


def check_deltas(deltas: torch.Tensor) -> None:
    if deltas.numel() == 0 or bool((deltas > 0).any()):
        raise ConfigError("deltas must be a non-empty list of offsets <= 0 (keys at or before the query)")


def _grid(model: Model, length: int, query: int | None) -> torch.Tensor:
    """Token grid (V, L): row b holds token b everywhere, except the last position when ``query`` is given."""
    V = model.config.vocab
    tokens = torch.arange(V, device=model.embed.device)[:, None].repeat(1, length)
    if query is not None:
        tokens[:, -1] = query
    return tokens


@torch.no_grad()
def mean_inputs(model: Model, length: int) -> torch.Tensor:
    """First-layer input averaged over a uniform token at each position: (S, L, d) = mean_x E[x] (+ rows)."""
    return model.inputs(_grid(model, length, None)).mean(1)


@torch.no_grad()
def carrier_kernel(model: Model, deltas, layer: int = 0, length: int | None = None) -> torch.Tensor:
    """c(delta) per member: (S, n) in the model's dtype, on the CPU.

    deltas: integers <= 0. ``length``: the sequence length whose last position is the query (default
    1 + max|delta|; it matters only for absolute encodings). Computed with the model's own
    ``Layer.scores`` on the mean inputs, so it follows the model exactly.
    """
    check_first_layer(layer)
    deltas = torch.as_tensor(deltas, dtype=torch.long).flatten()
    check_deltas(deltas)
    reach = int(-deltas.min()) + 1
    length = reach if length is None else length
    if length < reach:
        raise ConfigError(f"length={length} is too short for delta={int(deltas.min())}: use length >= {reach}")
    h = mean_inputs(model, length)[:, None]  # (S, 1, L, d)
    q_pos = torch.tensor([length - 1], device=h.device)
    scores = model.layers[0].scores(h, model.encoding, q_pos)[:, 0, 0]  # (S, L)
    return scores[:, (length - 1 + deltas).to(h.device)].cpu()


@torch.no_grad()
def logit_table(model: Model, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact first-layer logits of the last query for every (query token, key token, key position).

    Returns (table (S, V, V, L-1): logit of query token a at position L-1 on key token b at position j < L-1,
    self (S, V): the logit of query token a on itself). Float64 on the CPU.
    """
    if length < 2:
        raise ConfigError(f"length={length}: a logit table needs at least one key before the query")
    q_pos = torch.tensor([length - 1], device=model.embed.device)
    rows = []
    for a in range(model.config.vocab):
        h = model.inputs(_grid(model, length, a))
        rows.append(model.layers[0].scores(h, model.encoding, q_pos)[:, :, 0].double().cpu())  # (S, V, L)
    full = torch.stack(rows, 1)  # (S, V_a, V_b, L)
    return full[..., :-1], full[:, :, 0, -1]


def logit_matrix(model: Model, delta: int, length: int | None = None) -> torch.Tensor:
    """The V x V first-layer logits at one offset delta < 0: (S, V_query, V_key), float64."""
    if delta >= 0:
        raise ConfigError(f"delta={delta}: give a key before the query (delta < 0); use logit_table for the self logit")
    length = 1 - delta if length is None else length
    return logit_table(model, length)[0][..., length - 1 + delta]


def singular_values(model: Model, delta: int, length: int | None = None) -> torch.Tensor:
    """Singular values of the logit matrix at ``delta``, descending: (S, V)."""
    return torch.linalg.svdvals(logit_matrix(model, delta, length))


def rank_one_share(sv: torch.Tensor) -> torch.Tensor:
    """sigma_1^2 / sum sigma^2 per member: 1 for a rank-one matrix. sv: (S, V) -> (S,)."""
    return sv[:, 0] ** 2 / (sv**2).sum(1)


def participation_ratio(energy: torch.Tensor) -> torch.Tensor:
    """(sum e)^2 / sum e^2 along the last axis: the effective number of components."""
    return energy.sum(-1) ** 2 / (energy**2).sum(-1)


@dataclass
class PairSpectrum:
    """The RoPE kernel split over rotation pairs: c(delta) = sum_p amplitude_p cos(delta theta_p - phase_p)."""

    theta: np.ndarray  # (P,) rotation frequency of pair p (radians per position)
    amplitude: np.ndarray  # (S, P)
    phase: np.ndarray  # (S, P), radians in (-pi, pi]
    energy_top: dict[int, np.ndarray]  # k -> (S,) share of sum amplitude^2 in the k strongest pairs
    participation: np.ndarray  # (S,) participation ratio of the pair energies (effective number of pairs)
    position_share: np.ndarray  # (S,) share of in-window logit variance explained by the offset alone
    window: int  # the training length over which position_share is taken

    @property
    def period(self) -> np.ndarray:
        """(P,) positions per full turn of each pair: 2 pi / theta."""
        return 2 * math.pi / self.theta

    def pair_kernel(self, deltas) -> np.ndarray:
        """(S, P, n) the contribution of each pair at each offset."""
        d = np.asarray(deltas, dtype=np.float64)
        return self.amplitude[..., None] * np.cos(d[None, None] * self.theta[None, :, None] - self.phase[..., None])

    def kernel(self, deltas) -> np.ndarray:
        """(S, n) c(delta) rebuilt from the pairs."""
        return self.pair_kernel(deltas).sum(1)

    def dominant(self, member: int, k: int) -> np.ndarray:
        """Indices of the k strongest pairs of one member, strongest first."""
        return np.argsort(-self.amplitude[member])[:k]


def position_share(model: Model, window: int) -> torch.Tensor:
    """(S,) share of the variance of the logit over (query token, key token, offset in [-(window-1), -1])
    that the offset alone explains (law of total variance: the rest is content)."""
    table = logit_table(model, window)[0]  # (S, V, V, window-1)
    total = table.flatten(1).var(1, unbiased=False)
    by_offset = table.mean((1, 2)).var(1, unbiased=False)
    return by_offset / total


@torch.no_grad()
def pair_spectrum(model: Model, window: int | None = None) -> PairSpectrum:
    """Amplitude and phase of each RoPE pair in the first layer's kernel, with energy summaries.

    ``window``: the length over which the position-vs-content split is taken (default: training length).
    """
    c = model.config
    if c.encoding != "rope":
        raise ConfigError(f"encoding={c.encoding!r}: the pair spectrum is defined for RoPE only (encoding='rope')")
    h = mean_inputs(model, 1)[:, 0].double()  # (S, d)
    layer = model.layers[0]
    q, k = h[:, None] @ layer.wq.double(), h[:, None] @ layer.wk.double()  # (S, 1, d)
    qc = torch.complex(q[..., 0, 0::2], q[..., 0, 1::2])
    kc = torch.complex(k[..., 0, 0::2], k[..., 0, 1::2])
    z = qc * kc.conj() / math.sqrt(c.dim)  # c(delta) = sum_p Re(z_p exp(-i delta theta_p))
    energy = z.abs() ** 2
    ranked = energy.sort(-1, descending=True).values
    share = {k: (ranked[:, :k].sum(1) / energy.sum(1)).numpy() for k in TOP_PAIRS}
    window = c.train_length if window is None else window
    return PairSpectrum(
        theta=rope_frequencies(c.dim, c.rope_base).numpy(),
        amplitude=z.abs().numpy(),
        phase=z.angle().numpy(),
        energy_top=share,
        participation=participation_ratio(energy).numpy(),
        position_share=position_share(model, window).numpy(),
        window=window,
    )


@dataclass
class Margin:
    """c(-K) minus the best competing offset, per member (S,): > 0 means the target wins."""

    target: np.ndarray  # (S,) c(-K)
    in_window: np.ndarray  # (S,) over delta in [-(L_train-1), 0], delta != -K
    beyond: np.ndarray  # (S,) over delta in [-max_delta, -L_train]
    max_delta: int


def target_margin(model: Model, offset: int, train_length: int, max_delta: int | None = None) -> Margin:
    """Margin of the target offset over in-window and beyond-window offsets (kernel at the query's
    position max_delta, i.e. a sequence of length max_delta + 1)."""
    max_delta = BEYOND_MULTIPLE * train_length - 1 if max_delta is None else max_delta
    if not 0 < offset < train_length <= max_delta:
        raise ConfigError(
            f"need 0 < offset ({offset}) < train_length ({train_length}) <= max_delta ({max_delta})"
        )
    kern = carrier_kernel(model, -torch.arange(max_delta + 1)).double().numpy()  # column m is delta = -m
    target = kern[:, offset]
    inside = np.delete(kern[:, :train_length], offset, axis=1).max(1)
    return Margin(target, target - inside, target - kern[:, train_length:].max(1), max_delta)


@dataclass
class Peak:
    """An offset beyond the training window that scores within a margin of the target."""

    delta: int
    value: float  # c(delta)
    gap: float  # c(delta) - c(-K): >= 0 means it beats the target
    pairs: list[dict] = field(default_factory=list)  # dominant RoPE pairs: index, period, amplitude, mismatch


def explain(spectrum: PairSpectrum, member: int, delta: int, offset: int, k: int) -> list[dict]:
    """The k strongest pairs and how far each is from repeating its target phase at ``delta``.

    mismatch = (delta + K) theta_p wrapped to (-pi, pi]: near 0, pair p cannot tell delta from -K
    (delta lies about a whole number of periods beyond the target).
    """
    out = []
    for p in spectrum.dominant(member, k):
        turn = (delta + offset) * spectrum.theta[p]
        mismatch = math.remainder(turn, 2 * math.pi)
        out.append({
            "pair": int(p),
            "period": float(spectrum.period[p]),
            "amplitude": float(spectrum.amplitude[member, p]),
            "turns": float(turn / (2 * math.pi)),
            "mismatch": float(mismatch),
        })
    return out


def aliased_peaks(
    model: Model, offset: int, train_length: int, max_delta: int, margin: float, explain_pairs: int = 4
) -> list[list[Peak]]:
    """Per member, every delta in [-max_delta, -train_length] with c(delta) >= c(-K) - margin.

    For RoPE each peak lists the ``explain_pairs`` strongest pairs with their phase mismatch.
    """
    if margin < 0 or max_delta < train_length:
        raise ConfigError(f"need margin >= 0 (got {margin}) and max_delta >= train_length (got {max_delta})")
    kern = carrier_kernel(model, -torch.arange(max_delta + 1)).double().numpy()
    spectrum = pair_spectrum(model) if model.config.encoding == "rope" else None
    peaks = []
    for s in range(kern.shape[0]):
        target = kern[s, offset]
        found = []
        for m in np.flatnonzero(kern[s, train_length:] >= target - margin) + train_length:
            why = explain(spectrum, s, -int(m), offset, explain_pairs) if spectrum else []
            found.append(Peak(-int(m), float(kern[s, m]), float(kern[s, m] - target), why))
        peaks.append(found)
    return peaks


def predicted_failure_length(model: Model, offset: int, train_length: int, max_length: int) -> list[int | None]:
    """Per member, the first length L in (train_length, max_length] at which some offset beyond the window
    (delta <= -train_length) scores at least c(-K), or None. Absolute encodings are re-evaluated at each L."""
    if max_length <= train_length:
        raise ConfigError(f"max_length={max_length} must exceed train_length={train_length}")
    deltas = -torch.arange(max_length)
    if TRAITS[model.config.encoding].translation_invariant:
        kern = carrier_kernel(model, deltas).double().numpy()
        result = []
        for row in kern:
            beats = np.flatnonzero(row[train_length:] >= row[offset])
            result.append(int(beats[0]) + train_length + 1 if beats.size else None)
        return result
    result: list[int | None] = [None] * model.members
    for L in range(train_length + 1, max_length + 1):
        kern = carrier_kernel(model, deltas[:L], length=L).double().numpy()
        for s in range(model.members):
            if result[s] is None and kern[s, train_length:].max() >= kern[s, offset]:
                result[s] = L
        if all(r is not None for r in result):
            break
    return result


def seed_agreement(kern: np.ndarray) -> np.ndarray:
    """Cosine between the kernels of every pair of members, each curve centred first (a constant added to every
    logit leaves the softmax unchanged, so only the shape counts).

    kern: (S, n) kernels over the same n offsets. Returns the S(S-1)/2 cosines, pairs (i < j) in row order.
    """
    if kern.ndim != 2 or kern.shape[0] < 2:
        raise ConfigError(f"seed_agreement needs kernels of shape (S, n) with S >= 2 members; got {kern.shape}")
    centred = kern - kern.mean(1, keepdims=True)
    unit = centred / np.linalg.norm(centred, axis=1, keepdims=True)
    i, j = np.triu_indices(len(kern), 1)
    return (unit[i] * unit[j]).sum(1)


def reach_envelope(kern: np.ndarray, offset: int, train_length: int) -> np.ndarray:
    """(n,) the curve ``kernel_shapes`` draws from a kernel (n,) with entry j at delta = -j: the running maximum
    over j' <= j, j' != K, of (c(-j') - c(-K)) / (c(-K) - the best other in-window offset)."""
    rel = np.asarray(kern, dtype=np.float64) - kern[offset]
    margin = -np.delete(rel[:train_length], offset).max()
    rel[offset] = -np.inf
    return np.maximum.accumulate(rel) / margin
