"""Property-based: every numeric argument of every sub-command of ``python -m lengthgen`` is checked before any
work (issue 31, item 8). Hypothesis drives each sub-command with out-of-range, zero, negative, odd and huge
values (one to three bad flags at once) and expects exit code 2 with one line on stderr, no traceback, and
no training, solving or sweeping started (those are patched to fail the test).

The memory limit is fixed at 8 GB here, so that "huge" means the same on every machine."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
from unittest import mock

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lengthgen.__main__ import MAXMARGIN_COEFFICIENTS, MAXMARGIN_KERNEL, main
from lengthgen.config import MEMORY_ENV, Config, usable_cores

train_module = importlib.import_module("lengthgen.train")
D = Config()  # the defaults the flags start from: train length 32, offset 2, width 32
EXAMPLES = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


def below(limit: int) -> st.SearchStrategy[int]:
    """Whole numbers < limit: zero and negative ones included when limit > 0."""
    return st.integers(max_value=limit - 1)


def at_least(limit: int) -> st.SearchStrategy[int]:
    return st.integers(min_value=limit, max_value=limit * 10**6)


def odd() -> st.SearchStrategy[int]:
    return st.integers(min_value=-10**6, max_value=10**6).map(lambda n: 2 * n + 1)


def not_finite() -> st.SearchStrategy[str]:
    """nan, infinities and a literal that float() reads as inf."""
    return st.sampled_from(["nan", "inf", "-inf", "1e400", "-1e400"])


def floats_at_most(limit: float) -> st.SearchStrategy[float]:
    return st.floats(max_value=limit, allow_nan=False, allow_infinity=False)


def text(strategy: st.SearchStrategy) -> st.SearchStrategy[str]:
    return strategy.map(lambda v: v if isinstance(v, str) else repr(v))


# For each flag, values that must be refused (with every other flag at its default).
CONFIG_FLAGS: dict[str, st.SearchStrategy[str]] = {
    "--vocab": text(below(2) | at_least(10**6)),
    "--dim": text(below(1) | odd() | at_least(10**9)),
    "--train-length": text(below(D.offset + 1) | at_least(10**8)),
    "--min-train-length": text(below(D.offset + 1) | at_least(D.train_length + 1)),
    "--offset": text(below(1) | at_least(D.train_length)),
    "--layers": text(below(1) | at_least(10**9)),
    "--steps": text(below(0) | at_least(10**10)),
    "--batch": text(below(1) | at_least(10**9)),
    "--train-set": text(below(1) | at_least(10**9)),
    "--lr": text(floats_at_most(0.0) | not_finite()),
    "--weight-decay": text(floats_at_most(-1e-300) | not_finite()),
    "--target-accuracy": text(floats_at_most(-1e-300) | st.floats(min_value=1.0, exclude_min=True, allow_nan=False,
                                                                  allow_infinity=False) | not_finite()),
    "--rope-base": text(floats_at_most(1.0) | not_finite()),
    "--max-length": text(below(1)),
    "--init-scale": text(floats_at_most(0.0) | not_finite()),
    "--seeds": text(below(1) | at_least(10**7)),
    "--eval-lengths": text(below(D.offset + 1) | at_least(10**9)),
    "--samples": text(below(1) | at_least(10**10)),
}
APE_FLAGS = {"--max-length": text(below(D.train_length) | at_least(10**9))}  # with --encoding ape
MAXMARGIN_FLAGS: dict[str, st.SearchStrategy[str]] = {
    "--offset": text(below(1) | at_least(D.train_length)),
    "--train-length": text(below(D.offset + 1) | at_least(MAXMARGIN_COEFFICIENTS // D.dim + 1)),
    "--dim": text(below(1) | odd() | at_least(MAXMARGIN_COEFFICIENTS // D.train_length + 1)),
    "--rope-base": text(floats_at_most(1.0) | not_finite()),
    "--multiple": text(below(2) | at_least(MAXMARGIN_KERNEL // (D.train_length * D.dim) + 1)),
}
SWEEP_FLAGS = {"--workers": text(below(0) | at_least(usable_cores() + 1))}


def bad_flags(table: dict[str, st.SearchStrategy[str]]) -> st.SearchStrategy[list[str]]:
    """One to three distinct flags of ``table``, each with a bad value, as argv words ("--flag=value")."""
    return (st.lists(st.sampled_from(sorted(table)), min_size=1, max_size=3, unique=True)
            .flatmap(lambda flags: st.tuples(*(table[f] for f in flags))
                     .map(lambda values: [f"{f}={v}" for f, v in zip(flags, values)])))


def must_not_run(*args, **kwargs):
    raise AssertionError("work started: the input should have been refused first")


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """main(argv) in this process with training, solving and sweeping patched out: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, {MEMORY_ENV: "8G"}), \
            mock.patch.object(train_module, "_train", must_not_run), \
            mock.patch("lengthgen.maxmargin.solve", must_not_run), \
            mock.patch("lengthgen.sweep.run_sweep", must_not_run), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def assert_refused(argv: list[str]) -> None:
    code, out, err = run_cli(argv)
    assert code == 2, f"{argv}: exit code {code}, stderr {err!r}"
    assert out == "", f"{argv}: nothing on stdout when refused, got {out!r}"
    assert err.startswith("error: ") and err.count("\n") == 1, f"{argv}: one line on stderr, got {err!r}"
    assert "Traceback" not in err and len(err) < 400, f"{argv}: a short message, got {err!r}"


@EXAMPLES
@given(command=st.sampled_from(["train", "analyze"]), flags=bad_flags(CONFIG_FLAGS))
@example(command="train", flags=["--dim=0"])
@example(command="train", flags=["--vocab=-3"])
@example(command="analyze", flags=["--dim=3"])
@example(command="train", flags=["--steps=10000000000000"])
@example(command="train", flags=["--seeds=0", "--samples=0"])
def test_train_and_analyze_refuse_every_bad_number(command: str, flags: list[str]) -> None:
    assert_refused([command, *flags])


@EXAMPLES
@given(command=st.sampled_from(["train", "analyze"]), flags=bad_flags(APE_FLAGS))
def test_ape_table_size_is_checked(command: str, flags: list[str]) -> None:
    assert_refused([command, "--encoding", "ape", *flags])


@EXAMPLES
@given(geometry=st.sampled_from(["l2", "linf", "pairs"]), flags=bad_flags(MAXMARGIN_FLAGS))
@example(geometry="pairs", flags=["--rope-base=0"])  # the two cases: a solver traceback, an odd width
@example(geometry="linf", flags=["--dim=3"])
@example(geometry="l2", flags=["--train-length=-5"])
@example(geometry="l2", flags=["--multiple=1000000000"])
def test_maxmargin_refuses_every_bad_number(geometry: str, flags: list[str]) -> None:
    assert_refused(["maxmargin", "--geometry", geometry, *flags])


@EXAMPLES
@given(flags=bad_flags(SWEEP_FLAGS))
@example(flags=["--workers=-1"])
@example(flags=["--workers=100000"])
def test_sweep_refuses_bad_worker_counts(flags: list[str]) -> None:
    assert_refused(["sweep", "sweeps/budget.json", *flags])
