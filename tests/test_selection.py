"""The exact rungs: gradients right at any loss, solutions right, and each update rule reaching its own geometry's
max-margin solution (the claims of issue 15 on rungs a and b), plus the maxmargin command."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from lengthgen import ConfigError
from lengthgen import maxmargin as mm
from lengthgen import selection as sel
from lengthgen.chapters import ch10_selection as page
from lengthgen.__main__ import main
from lengthgen.optim import Optimizer

KERNEL = dict(offset=2, train_length=16, dim=16)
ATTENTION = dict(offset=2, train_length=8, vocab=6, dim=4, sequences=12)  # Frobenius and nuclear differ here


@pytest.fixture(scope="module")
def kernel() -> sel.Rung:
    return sel.kernel_rung(**KERNEL)


@pytest.fixture(scope="module")
def attention() -> sel.Rung:
    return sel.attention_rung(**ATTENTION)


@pytest.fixture(scope="module")
def rope_attention() -> sel.Rung:
    return sel.rope_attention_rung(**ATTENTION)


def test_kernel_rung_is_the_maxmargin_kernel_problem(kernel: sel.Rung) -> None:
    theta = mm.solve(**KERNEL).theta
    assert np.allclose(kernel.constraints(), mm.kernel_constraints(2, 16, theta))
    assert np.allclose(kernel.solution("l2"), mm.solve(**KERNEL, norm="l2").w, atol=1e-7)


def test_attention_rung_constrains_every_key_and_its_solutions_have_margin_one(attention: sel.Rung) -> None:
    N, T = ATTENTION["sequences"], ATTENTION["train_length"]
    assert attention.constraints().shape == (N * (T - 1), attention.dim)
    tokens = attention.keys[:, :, : ATTENTION["vocab"]].argmax(-1)
    same = (tokens == tokens[:, [T - 1 - ATTENTION["offset"]]]).sum() - N
    assert same > 0  # the seeded set has keys that repeat the target's token: they are constrained too
    for g in attention.geometries:
        x = torch.from_numpy(attention.solution(g))[None]
        assert abs(float(attention.margins(x)[0]) - 1) < 1e-7, g
    fro, nuc = attention.solution("fro"), attention.solution("nuclear")
    assert np.linalg.norm(fro) <= np.linalg.norm(nuc) + 1e-7
    assert mm.norm_of(nuc, "nuclear", attention.shape) <= mm.norm_of(fro, "nuclear", attention.shape) + 1e-6
    assert mm.cosine(fro, nuc) < 0.97  # the two geometries name different directions on this rung


@pytest.mark.parametrize("rung_name", ["kernel", "attention", "rope_attention"])
@pytest.mark.parametrize("parametrisation", sel.PARAMETRISATIONS)
def test_gradient_matches_autograd(rung_name: str, parametrisation: str, request) -> None:
    rung = request.getfixturevalue(rung_name)
    n = sel.trained_size(rung, parametrisation)
    p = torch.randn(2, n, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 0.5
    q = p.clone().requires_grad_(True)
    auto, = torch.autograd.grad(rung.loss(sel.end_to_end(rung, parametrisation, q)).sum(), q)
    hand = sel.pullback(rung, parametrisation, p, rung.gradient(sel.end_to_end(rung, parametrisation, p)))
    assert torch.allclose(auto, hand, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("rung_name", ["kernel", "attention", "rope_attention"])
@pytest.mark.parametrize("scale", [0.5, 60.0])
def test_the_compiled_gradient_is_the_gradient(rung_name: str, scale: float, request) -> None:
    """``fast_gradient`` against ``gradient``, near the start and at a margin of 60 (loss about e^-60)."""
    rung = request.getfixturevalue(rung_name)
    x = torch.from_numpy(np.stack([rung.solution(rung.geometries[0]), rung.solution(rung.geometries[1])])) * scale
    want = rung.gradient(x)
    got = rung.fast_gradient(x, torch.empty_like(x))
    assert torch.allclose(got, want, rtol=1e-9, atol=1e-12 * float(want.abs().max()))


@pytest.mark.parametrize("rung_name,parametrisation", [("kernel", "linear"), ("kernel", "factorised"),
                                                       ("attention", "factorised"), ("rope_attention", "factorised")])
@pytest.mark.parametrize("rule,kw", [("gd", {}), ("ngd", {}), ("sign", {}), ("signum", {}), ("adam", {}),
                                     ("adam", {"eps": 0.0, "power": 0.5})])
def test_the_compiled_steps_are_the_optimisers_steps(rung_name: str, parametrisation: str, rule: str, kw: dict,
                                                      request) -> None:
    """``run``'s compiled stretches (``_stretch``) end where ``optim.Optimizer`` stepping the torch gradient
    (``Rung.gradient`` through ``pullback``) ends, step by step, over 40 steps."""
    rung = request.getfixturevalue(rung_name)
    tr = sel.run(rung, rule, 0.01, 40, seeds=(0, 1), parametrisation=parametrisation, checkpoints=3, **kw)
    n_params = sel.trained_size(rung, parametrisation)
    params = torch.stack([torch.randn(n_params, generator=sel.generator(s, sel.STREAM_INIT, n_params),
                                      dtype=torch.float64) for s in (0, 1)]) * (0.1 / np.sqrt(n_params))
    opt = Optimizer(rule, params, [0.01, 0.01], compiled=False, **kw)
    for _ in range(40):
        opt.step(sel.pullback(rung, parametrisation, opt.params,
                              rung.gradient(sel.end_to_end(rung, parametrisation, opt.params))))
    want = sel.end_to_end(rung, parametrisation, opt.params).numpy()
    assert np.allclose(tr.final, want, rtol=1e-9, atol=1e-12), np.abs(tr.final - want).max()


def test_gradient_stays_balanced_where_the_loss_is_far_below_float_precision(kernel: sel.Rung) -> None:
    x = torch.from_numpy(kernel.solution("l2") * 60)[None]  # margin 60: loss about e^-60
    loss = float(kernel.loss(x)[0])
    assert 0 < loss < 1e-20
    dz = kernel.logit_gradient(x)[0, 0]  # (J,)
    # the target is pushed up exactly as hard as the others are pushed down; the naive p_t - 1 is 0 here
    assert float(dz[2]) < 0 and abs(float(dz.sum())) < 1e-9 * abs(float(dz[2]))
    naive = torch.softmax(kernel.logits(x), -1)[0, 0]
    assert float(naive[2] - 1) == 0.0  # what float64 makes of p_t - 1 at this loss
    assert float(kernel.gradient(x).norm()) > 0


def test_normalised_step_has_length_lr_for_tiny_gradients() -> None:
    p = torch.zeros(1, 3, dtype=torch.float64)
    Optimizer("ngd", p, [0.5]).step(torch.tensor([[3e-200, 4e-200, 0.0]], dtype=torch.float64))
    assert torch.allclose(p, torch.tensor([[-0.3, -0.4, 0.0]], dtype=torch.float64))


def test_claim_ngd_on_the_kernel_reaches_the_l2_solution(kernel: sel.Rung) -> None:
    tr = sel.run(kernel, "ngd", 0.1, 2000, checkpoints=10)
    end = tr.final_cosine()
    assert (end["l2"] >= 0.99).all(), end
    assert (end["linf"] < 0.9).all(), end
    assert tr.seed_to_seed[-1] > 0.99 and tr.random_level["l2"] < 0.5
    assert (tr.margin_ratio["l2"][:, -1] > 0.99).all() and (tr.margin_ratio["l2"] <= 1 + 1e-9).all()


def test_claim_sign_descent_on_the_kernel_reaches_the_linf_solution(kernel: sel.Rung) -> None:
    tr = sel.run(kernel, "sign", 0.01, 5000, checkpoints=10)
    end = tr.final_cosine()
    assert (end["linf"] >= 0.99).all(), end
    assert (end["l2"] < 0.9).all(), end  # clearly not the L2 direction
    assert (tr.margin_ratio["linf"][:, -1] > 0.99).all()
    assert np.allclose(tr.update_max, 1.0)  # every coordinate moves by exactly lr


def test_claim_ngd_on_the_combined_matrix_reaches_the_frobenius_attention_svm(attention: sel.Rung) -> None:
    tr = sel.run(attention, "ngd", 0.1, 2000, checkpoints=10)
    end = tr.final_cosine()
    assert (end["fro"] >= 0.99).all(), end
    assert (end["fro"] > end["nuclear"] + 0.02).all(), end
    assert tr.seed_to_seed[-1] > 0.99


def test_claim_normalised_descent_on_a_factorisation_reaches_its_own_geometry(attention: sel.Rung) -> None:
    """NGD on (Wq, Wk) from a small start: the nuclear-norm attention-SVM, not the Frobenius one; NGD on a
    product q_p conj(k_p) per RoPE pair: the pair norm, not L2 (base 100, where the two differ: cosine 0.87)."""
    tr = sel.run(attention, "ngd", 0.002, 10_000, parametrisation="factorised", init_scale=1e-3, checkpoints=5)
    end = tr.final_cosine()
    assert (end["nuclear"] >= 0.99).all() and (end["fro"] < 0.97).all(), end
    kernel = sel.kernel_rung(2, 32, 32, rope_base=100.0)
    assert mm.cosine(kernel.solution("l2"), kernel.solution("pairs")) < 0.9
    tr = sel.run(kernel, "ngd", 0.0025, 20_000, parametrisation="factorised", init_scale=1e-3, checkpoints=5)
    end = tr.final_cosine()  # measured: pairs 0.999 and 0.990, L2 0.876 and 0.902 (seeds 0, 1)
    assert (end["pairs"] >= 0.98).all() and (end["pairs"] - end["l2"] >= 0.05).all(), end


def test_claim_normalised_descent_on_the_kernels_factors_reaches_the_pair_norms_margin() -> None:
    """NGD on q_p, k_p reaches 0.99 of the pair norm's max margin on the default rung (measured 0.996, L2's 0.980).
    (At base 100 the margin ratio stops at 0.98 when the margin reaches ~745, where float64's exp(-margin), and with
    it the gradient, is 0: the test above checks the direction there.)"""
    kernel = sel.kernel_rung(2, 32, 32)
    tr = sel.run(kernel, "ngd", 0.001, 50_000, parametrisation="factorised", init_scale=1e-3, checkpoints=5)
    assert (tr.margin_ratio["pairs"][:, -1] >= 0.99).all(), tr.margin_ratio["pairs"]
    assert (tr.margin_ratio["pairs"][:, -1] > tr.margin_ratio["l2"][:, -1]).all()


def test_claim_adam_under_its_theorem_reaches_the_linf_margin_on_the_kernel() -> None:
    """Zhang, Zou & Cao (2024)'s conditions: full batch, betas (0.9, 0.999), step 0.01 (t+2)^-0.5, eps = 0. On the
    default kernel rung (K = 2, T = 32, d = 32) Adam reaches 0.99 of the l-infinity max margin in 1e6 steps
    (measured 0.9917), and ends far from the L2 direction; at the book's constant lr 0.01 with eps = 1e-8 it does not
    (measured 0.80 after 1e5 steps in the ladder)."""
    kernel = sel.kernel_rung(2, 32, 32)
    tr = sel.run(kernel, "adam", 0.01, 1_000_000, seeds=(0,), checkpoints=4, eps=0.0, power=0.5)
    assert tr.margin_ratio["linf"][0, -1] >= 0.99, tr.margin_ratio["linf"]
    assert tr.cosine["l2"][0, -1] < 0.8 and tr.update_max[0, -1] > 0.9  # sign-like at the end


def test_claim_sign_descent_on_the_factors_reaches_the_geometry_they_induce(kernel: sel.Rung) -> None:
    """Sign descent on q_p, k_p (an l-infinity geometry on the factors) reaches the max margin of the norm that
    geometry induces on w, max_p (|Re z_p| + |Im z_p|) (``maxmargin``'s derivation), not l-infinity's on w."""
    tr = sel.run(kernel, "sign", 0.001, 20_000, parametrisation="factorised", checkpoints=5)
    assert (tr.margin_ratio["factors_linf"][:, -1] >= 0.99).all(), tr.margin_ratio["factors_linf"]  # 0.9945
    assert (tr.margin_ratio["linf"][:, -1] < 0.8).all() and (tr.cosine["factors_linf"][:, -1] >= 0.99).all()


def test_claim_sign_descent_on_the_attention_matrix_reaches_its_linf_margin(attention: sel.Rung) -> None:
    tr = sel.run(attention, "sign", 0.01, 10_000, checkpoints=5)
    assert (tr.margin_ratio["linf"][:, -1] >= 0.99).all(), tr.margin_ratio["linf"]  # measured 0.9966
    assert (tr.margin_ratio["fro"][:, -1] < 0.5).all()


def test_rope_attention_rung_is_rope_token_selection(rope_attention: sel.Rung) -> None:
    """Its logit is sum_p Re(M_p[a, b] e^(-i delta theta_p)) for the query's token a and the key's token b at offset
    delta; its token tables give rank-one M_p; the pair-nuclear relaxation's solution is not rank one here (so the
    table names no geometry for gradient descent on the tables)."""
    V, d, T = ATTENTION["vocab"], ATTENTION["dim"], ATTENTION["train_length"]
    x = torch.randn(1, rope_attention.dim, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    M = x.reshape(V, V, 2, d // 2)
    theta = torch.from_numpy(mm.solve(2, T, d).theta)
    tokens = rope_attention.keys.reshape(ATTENTION["sequences"], T, V, d).abs().sum(-1).argmax(-1)  # (N, T)
    n, j = 3, 1
    a, b, delta = int(tokens[n, -1]), int(tokens[n, j]), j - (T - 1)
    z = torch.complex(M[a, b, 0], M[a, b, 1]) * torch.exp(-1j * delta * theta)
    assert float(rope_attention.logits(x)[0, n, j]) == pytest.approx(float(z.real.sum()))
    q = torch.randn(1, sel.trained_size(rope_attention, "factorised"), generator=torch.Generator().manual_seed(4),
                    dtype=torch.float64)
    X = sel.end_to_end(rope_attention, "factorised", q).reshape(V, V, 2, d // 2)
    for p in range(d // 2):
        assert np.linalg.matrix_rank(torch.complex(X[..., 0, p], X[..., 1, p]).numpy(), tol=1e-10) == 1
    sol = rope_attention.solution("pair_nuclear")
    assert abs(float(rope_attention.margins(torch.from_numpy(sol)[None])[0]) - 1) < 1e-6
    S = sol.reshape(V, V, 2, d // 2)
    ranks = [np.linalg.matrix_rank(S[..., 0, p] + 1j * S[..., 1, p], tol=1e-4) for p in range(d // 2)]
    assert max(ranks) > 1 and sel.expected_geometry(rope_attention, "gd", "factorised") is None
    assert sel.expected_geometry(rope_attention, "gd") == "fro" and sel.expected_geometry(rope_attention, "sign") == "linf"


def test_claim_rules_on_the_rope_attention_matrices_reach_their_own_geometries(rope_attention: sel.Rung) -> None:
    """NGD on the combined per-pair matrices: the Frobenius attention-SVM (measured 0.992 at 1e4 steps); sign descent
    on them: the entrywise l-infinity one (measured 0.996)."""
    ngd = sel.run(rope_attention, "ngd", 0.05, 20_000, checkpoints=4)
    assert (ngd.margin_ratio["fro"][:, -1] >= 0.99).all() and (ngd.cosine["fro"][:, -1] >= 0.99).all(), ngd.margin_ratio
    sign = sel.run(rope_attention, "sign", 0.01, 10_000, checkpoints=4)
    assert (sign.margin_ratio["linf"][:, -1] >= 0.99).all() and (sign.margin_ratio["fro"][:, -1] < 0.5).all()


def test_adam_records_its_second_moment_against_eps(kernel: sel.Rung) -> None:
    sign_like = sel.run(kernel, "adam", 0.01, 50, checkpoints=5, eps=1e-300, betas=(0.9, 0.9))
    damped = sel.run(kernel, "adam", 0.01, 50, checkpoints=5, eps=1e3)
    assert sign_like.adam_median.shape == sign_like.adam_max.shape == (2, len(sign_like.steps))
    assert (sign_like.adam_median <= sign_like.adam_max).all()
    assert np.allclose(sign_like.update_max[:, 0], 1.0)  # the first Adam step is a sign step when eps is negligible
    assert (damped.update_max < 1e-2).all()  # eps far above sqrt(v_hat): a gradient step of size lr / eps
    assert sel.run(kernel, "gd", 0.1, 5, checkpoints=2).adam_median is None


def test_expected_geometry(kernel: sel.Rung, attention: sel.Rung) -> None:
    assert sel.expected_geometry(kernel, "ngd") == "l2" and sel.expected_geometry(kernel, "adam") == "linf"
    assert sel.expected_geometry(attention, "gd") == "fro" and sel.expected_geometry(attention, "signum") == "linf"
    assert sel.expected_geometry(kernel, "gd", "factorised") == "pairs"
    assert sel.expected_geometry(kernel, "sign", "factorised") == sel.expected_geometry(kernel, "adam", "factorised") \
        == "factors_linf"
    assert [sel.conditions("adam", "linear", p, e) for p, e in [(0.5, 0.0), (0.0, 0.0), (0.5, 1e-8)]] \
        == ["theorem", "outside", "outside"]
    assert sel.conditions("adam", "factorised", 0.5, 0.0) == "analogy" and sel.conditions("sign", "linear", 0, 0) == "theorem"
    assert sel.expected_geometry(attention, "gd", "factorised") == "nuclear"
    assert sel.expected_geometry(attention, "sign", "factorised") is None


def test_bad_settings_say_what_to_change(kernel: sel.Rung) -> None:
    with pytest.raises(ConfigError, match="rule"):
        sel.run(kernel, "sgd", 0.1, 10)
    with pytest.raises(ConfigError, match="steps"):
        sel.run(kernel, "gd", 0.1, 0)
    with pytest.raises(ConfigError, match="geometry"):
        kernel.solution("fro")
    with pytest.raises(ConfigError, match="offset"):
        sel.attention_rung(8, 8, 4, 4, 4)


def test_log_steps() -> None:
    marks = sel.log_steps(1000, 10)
    assert marks[0] == 1 and marks[-1] == 1000 and (np.diff(marks) > 0).all()


def test_maxmargin_command(capsys) -> None:
    assert main(["maxmargin", "--geometry", "linf", "--offset", "2", "--train-length", "16", "--dim", "16",
                 "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    sol = mm.solve(2, 16, 16, norm="linf")
    assert np.isclose(rep["in_window_margin"], 1) and np.isclose(rep["beyond_margin"], sol.beyond_margin(255))
    assert len(rep["kernel"]) == 16 and rep["peaks"][0]["gap"] == pytest.approx(-rep["beyond_margin"])
    assert main(["maxmargin", "--geometry", "pairs", "--train-length", "16", "--dim", "16"]) == 0
    text = capsys.readouterr().out
    assert "beyond-window margin" in text and "far-field peaks" in text
    assert main(["maxmargin", "--geometry", "l1"]) == 2
    assert "l2, linf, pairs" in capsys.readouterr().err


def test_figures_of_the_rungs(kernel: sel.Rung) -> None:
    from lengthgen import plots

    runs = {rule: sel.run(kernel, rule, 0.01, 20, checkpoints=4) for rule in ("ngd", "adam")}
    fig = plots.selection_curves(runs)
    assert len(fig.data) == 2 * (len(kernel.geometries) + 1) and fig.layout.xaxis.type == "log" and "kernel" in fig.layout.title.text
    levels = runs["ngd"].random_level  # the rung's: drawn once, as dotted lines across the plot
    assert [(s.y0, s.name) for s in fig.layout.shapes] == [(v, f"random direction vs {g} (mean |cos|)")
                                                           for g, v in levels.items()]
    with pytest.raises(ValueError, match="one rung"):
        plots.selection_curves({"ngd": runs["ngd"], "other": sel.run(sel.kernel_rung(2, 4, 4), "ngd", 0.01, 20,
                                                                    checkpoints=4)})
    anatomy = plots.adam_anatomy(runs["adam"])
    assert any("eps" in t.name for t in anatomy.data) and anatomy.layout.height
    with pytest.raises(ValueError, match="Adam"):
        plots.adam_anatomy(runs["ngd"])


# The ladder's table and what chapter 10 reads from it ------------------------------------------------------------

@pytest.fixture(scope="module")
def short_ladder(kernel: sel.Rung) -> list[sel.Trajectory]:
    return sel.ladder(kernel, scale=0.001, checkpoints=6)


def test_ladder_rows_label_each_recipe(short_ladder, kernel: sel.Rung) -> None:
    rows = page.ladder_rows(short_ladder, kernel)
    assert [r["label"] for r in rows][4:] == ["adam, lr 0.01, eps 1e-08", "adam, 0.01 (t+2)^-0.5, eps 0",
                                              "gd, factorised", "ngd, factorised", "sign, factorised"]
    assert [r["conditions"] for r in rows][4:6] == ["outside", "theorem"]
    assert rows[0] == {**sel.summary(short_ladder[0], kernel), "label": "gd"}
    table = page.ladder_table(rows, kernel)
    assert all(len(r) == len(page.ladder_header(kernel)) for r in table)
    for r, line in zip(rows, table):
        assert line[-2].startswith("-" if r["own"] is None else "yes" if sel.reached(r) else "no")
    assert table[4][-2].endswith("(outside its theorem)")
    numbers = page.kernel_rung_numbers(rows, kernel)
    assert numbers["adam_default"] == rows[4]["cos_linf"] and numbers["adam_theorem"] == rows[5]["cos_linf"]
    assert numbers["sign_factors_ratio"] == rows[8]["ratio_factors_linf"]
    assert numbers["linf_l2"] == pytest.approx(float(mm.cosine(kernel.solution("linf"), kernel.solution("l2"))))


def test_rate_is_the_margin_ratio_gained_over_the_last_decade(short_ladder) -> None:
    import dataclasses

    tr = short_ladder[0]
    steps = np.array([1, 10, 100, 1000])
    ratio = np.array([[0.1, 0.5, 0.8, 0.9]] * 2)
    fake = dataclasses.replace(tr, steps=steps, margin_ratio={"l2": ratio})
    assert sel.rate(fake, "l2") == pytest.approx(0.1)  # 0.8 at 100 -> 0.9 at 1000: 0.1 a decade


def test_ladder_numbers_count_the_rules_with_a_geometry_of_their_own() -> None:
    rows = [{"own": "l2", "reached_own": True, "own_margin": False, "label": "gd", "steps": 10, "conditions": "theorem"},
            {"own": "linf", "reached_own": False, "own_margin": True, "label": "sign", "steps": 10,
             "conditions": "theorem"},
            {"own": "linf", "reached_own": False, "own_margin": False, "label": "adam", "steps": 20,
             "cos_linf": 0.5, "ratio_linf": 0.25, "conditions": "theorem"},
            {"own": "linf", "reached_own": False, "own_margin": False, "label": "adam, lr 0.01", "steps": 20,
             "cos_linf": 0.5, "ratio_linf": 0.25, "conditions": "outside"},
            {"own": None, "reached_own": None, "own_margin": None, "label": "signum", "steps": 10,
             "conditions": "theorem"}]
    assert page.ladder_numbers(rows) == {"reached": 2, "named": 3, "outside": "adam, lr 0.01",
                                        "missed": "adam (20 steps: cosine 0.500, margin ratio 0.250)"}
    assert page.ladder_numbers(rows[:2])["missed"] == "none" and page.ladder_numbers(rows[:2])["outside"] == "none"


def test_adams_reading_follows_its_anatomy(short_ladder) -> None:
    import dataclasses

    adam, theorem = short_ladder[4], short_ladder[5]
    numbers = sel.adam_numbers(adam)
    assert numbers["eps"] == 1e-8 and numbers["median_over_eps"] == pytest.approx(adam.adam_median[:, -1].mean() / 1e-8)
    assert numbers["lr_over_memory"] == pytest.approx(10.0)  # lr 0.01 against 1 - beta2 = 0.001
    assert sel.adam_numbers(theorem)["median_over_eps"] == np.inf  # eps = 0
    with pytest.raises(ConfigError, match="Adam run"):
        sel.adam_numbers(short_ladder[0])
    C = len(adam.steps)
    big, small = np.full((2, C), 1e-3), np.full((2, C), 1e-10)
    sign_like = dataclasses.replace(adam, adam_median=big, update_max=np.ones((2, C)))
    assert sel.adam_ends(sign_like) == "step size" and "sign-like" in page.adam_reading(sign_like)
    held = dataclasses.replace(adam, adam_median=big, update_max=np.full((2, C), 0.1))
    assert sel.adam_ends(held) == "memory of v" and "older, larger" in page.adam_reading(held)
    damped = dataclasses.replace(adam, adam_median=small, update_max=np.full((2, C), 0.1))
    assert sel.adam_ends(damped) == "eps" and "dominates" in page.adam_reading(damped)
    underflow = dataclasses.replace(theorem, adam_median=np.full((2, len(theorem.steps)), 1e-160))
    assert sel.adam_ends(underflow) == "float64 range" and "smallest" in page.adam_reading(underflow)
    T = len(theorem.steps)
    later = np.concatenate([np.full((2, T - 2), 1e-3), np.full((2, 2), 1e-160)], 1)
    held_then_range = dataclasses.replace(theorem, adam_median=later, update_max=np.full((2, T), 0.1))
    assert sel.adam_course(held_then_range) == f"memory of v, then float64 range from step {int(theorem.steps[-2]):,}"
    assert sel.adam_course(sign_like) == "step size"
    assert page.adam_reading(adam).startswith("This run is outside the conditions")
    assert page.adam_reading(theorem).startswith("This run is inside the conditions")


def test_adam_table_reads_every_decade(kernel: sel.Rung) -> None:
    recipes = [sel.RuleSettings("adam", 0.01, 1000, eps=0.0, power=0.5), sel.RuleSettings("adam", 0.01, 1000)]
    runs = sel.adam_runs(kernel, recipes, seeds=(0,))
    assert sel.decades(runs[0].steps) == [100, 1000]
    header, table = page.adam_table_header(runs[0].steps), page.adam_table(runs)
    assert header[2:4] == ["t = 1e2", "t = 1e3"] and all(len(r) == len(header) for r in table)
    assert table[0][:2] == ["0.01 (t+2)^-0.5", "0"] and table[1][:2] == ["0.01 (lr / (1 - b2) = 10)", "1e-08"]
    assert table[0][3] == f"{runs[0].margin_ratio['linf'][:, -1].mean():.3f}"
    numbers = page.adam_table_numbers(runs)
    assert numbers["theorem_best_schedule"] == "0.01 (t+2)^-0.5" and numbers["constant_best_schedule"] == "lr 0.01"
    assert numbers["by_eps"] + numbers["by_memory"] + numbers["by_step"] + numbers["by_range"] == 2 and numbers["steps"] == 1000
