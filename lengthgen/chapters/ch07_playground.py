"""Chapter 7 (``book/07_playground``): what the page states about the static playground's grid.

How the grid was computed (``describe``) and what it shows (``reading``), as numbers and words the prose glues,
read from the ``playground.PlaygroundGrid`` that ``playground.compute_grid`` trained and measured; nothing here
trains or measures a model.

Shapes: the grid's accuracy is (recipes, T, K, encodings, multiples, seeds).
"""

from __future__ import annotations

import numpy as np

from ..playground import PlaygroundGrid


def describe(grid: PlaygroundGrid) -> dict[str, object]:
    """How the grid was computed, as the chapter words it: the training lengths, offsets, multiples and seeds
    (counts and comma-separated lists), held-out ``samples``, ``n_models`` trained, ``grid_seconds`` taken, the
    ``chance`` level, and each recipe's name and settings (``recipe_{i}_name``, ``recipe_{i}``, in grid order)."""
    out: dict[str, object] = {
        "n_T": len(grid.train_lengths), "n_K": len(grid.offsets),
        "train_lengths": ", ".join(map(str, grid.train_lengths)), "offsets": ", ".join(map(str, grid.offsets)),
        "multiples": ", ".join(f"{m}x" for m in grid.multiples), "seeds": ", ".join(map(str, grid.seeds)),
        "n_seeds": len(grid.seeds), "samples": grid.samples, "n_models": int(grid.accuracy[..., 0, :].size),
        "grid_seconds": round(grid.seconds), "chance": grid.chance,
    }
    for i, (name, text) in enumerate(grid.recipes.items()):
        out |= {f"recipe_{i}_name": name, f"recipe_{i}": text}
    return out


def reading(grid: PlaygroundGrid) -> dict[str, object]:
    """What the grid shows, over its (recipe, T, K) points: ``n_points``; at how many RoPE's mean attention peaks
    on the target K back (``rope_at_target``) and APE's on x_(T-K), its training target (``ape_at_pinned``); APE's
    highest mean accuracy past 1x (``ape_beyond_max``); per recipe i, RoPE's lowest mean accuracy at 2x
    (``rope_2x_min_{i}``) and its mean over the grid at the farthest multiple (``rope_far_{i}``, named by ``far``)."""
    for need in ("rope", "ape"):
        if need not in grid.encodings:
            raise ValueError(f"reading: the grid has no {need!r} models (encodings {grid.encodings}); "
                             "compute it with encodings that include rope and ape")
    if 2 not in grid.multiples or grid.multiples[0] != 1:
        raise ValueError(f"reading: evaluate the grid at 1x first and at 2x (multiples {grid.multiples})")
    e = {enc: grid.encodings.index(enc) for enc in grid.encodings}
    mean = grid.accuracy.mean(-1)  # (nR, nT, nK, nE, nM)
    peaks = grid.peak_back()  # (nR, nT, nK, nE): positions back
    back = np.array(grid.offsets)[None, None, :]  # the target, K back
    pinned = (grid.profile_multiple - 1) * np.array(grid.train_lengths)[None, :, None] + back  # x_(T-K)
    out: dict[str, object] = {
        "n_points": int(peaks[..., 0].size), "ape_beyond_max": float(mean[..., e["ape"], 1:].max()),
        "rope_at_target": int((peaks[..., e["rope"]] == back).sum()),
        "ape_at_pinned": int((peaks[..., e["ape"]] == pinned).sum()), "far": f"{grid.multiples[-1]}x",
    }
    for i in range(len(grid.recipes)):
        out[f"rope_2x_min_{i}"] = float(mean[i, :, :, e["rope"], grid.multiples.index(2)].min())
        out[f"rope_far_{i}"] = float(mean[i, :, :, e["rope"], -1].mean())
    return out
