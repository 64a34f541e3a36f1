"""lengthgen: length generalization of attention with relative (RoPE) and absolute (APE) positions."""

from .jit_cache import use_versioned_cache

use_versioned_cache()  # first: numba fixes a compiled function's cache folder when the function is defined

# second, before anything imports torch: on a first run, the step's first compile begins in a helper forked now
from .engine import first_compile as _first_compile  # noqa: E402

_first_compile.start()

from .config import ENCODINGS, Config, ConfigError, check_length
from .evaluate import Evaluation, LengthResult, evaluate, evaluate_length
from .model import Model, Output
from .task import eval_tokens, targets
from .train import Trained, default_device, train

__all__ = [
    "ENCODINGS",
    "Config",
    "ConfigError",
    "Evaluation",
    "LengthResult",
    "Model",
    "Output",
    "Trained",
    "check_length",
    "default_device",
    "eval_tokens",
    "evaluate",
    "evaluate_length",
    "targets",
    "train",
]
