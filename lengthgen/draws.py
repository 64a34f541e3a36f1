"""Token draws of ``torch.randint`` from a CPU generator's own state, compiled: the same numbers, and the generator
left in the same state, several times faster than torch's call for the small batches of training.

torch's CPU generator is mt19937; ``randint_`` draws into a tensor (``task.TrainStream``), ``draw_steps`` draws many
steps' batches of many members in one compiled call (``tables.TableStep.run``, before a stretch of steps: on a second
thread ahead of a lone model, on the path of each thread that trains a group of an ensemble's members), from each
member's state as ``mt_state`` reads it (uint32 words, kept across the stretch's blocks, written back once after it).
tests/test_fused.py checks the draws against ``torch.randint`` bitwise.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from numba import njit

# torch's CPU generator (mt19937) as ``Generator.get_state`` lays it out: the number of words left + 1
# (int32 at byte 8), the next word (uint64 at byte 16), the 624 words (uint64 each, from byte 24)
_MT_STATE_BYTES, _MT_N, _MT_M = 5056, 624, 397
# where each lies in the state's bytes read as 32-bit words: the count, the low half of the next word's index and of
# each word (a 64-bit field's low half comes first on a little-endian machine, second on a big-endian one)
_LOW = 0 if sys.byteorder == "little" else 1
_LEFT, _NEXT, _WORDS = 2, 4 + _LOW, 6 + _LOW  # the first word's; each next two on
# its constants as 32-bit unsigned integers: the words hold 32 bits, and in 32-bit lanes the twist and the tempering
# run twice as many words to a vector as in torch's 64-bit ones (numba turns a mix of signed and unsigned 64-bit
# integers into floats, so every operand is one of these)
_U = {name: np.uint32(v) for name, v in dict(upper=0x80000000, lower=0x7FFFFFFF, a=0x9908B0DF, b=0x9D2C5680,
                                             c=0xEFC60000, zero=0, one=1, s11=11, s7=7, s15=15, s18=18).items()}
_UPPER, _LOWER, _A, _B, _C, _ZERO, _ONE = (_U[k] for k in ("upper", "lower", "a", "b", "c", "zero", "one"))
_S11, _S7, _S15, _S18 = (_U[k] for k in ("s11", "s7", "s15", "s18"))


@njit(cache=True)
def _mt_twist(u, v, w):
    """mt19937's recurrence: w ^ twist(u, v), as uint32 (numba widens operations on uint32 to uint64; the cast
    back keeps the code in 32-bit lanes)."""
    return np.uint32(w ^ (((u & _UPPER) | (v & _LOWER)) >> _ONE) ^ ((_ZERO - (v & _ONE)) & _A))


@njit(cache=True)
def _mt_next(words):
    """The next 624 words of mt19937 in place (torch's next_state), from the current 624 (uint32), in torch's
    order: three loops, each free of dependences shorter than a vector."""
    for i in range(_MT_N - _MT_M):
        words[i] = _mt_twist(words[i], words[i + 1], words[i + _MT_M])
    for i in range(_MT_N - _MT_M, _MT_N - 1):
        words[i] = _mt_twist(words[i], words[i + 1], words[i + _MT_M - _MT_N])
    words[_MT_N - 1] = _mt_twist(words[_MT_N - 1], words[0], words[_MT_M - 1])


@njit(cache=True, inline="always")
def _mt_temper(y):
    """mt19937's tempering of the word y, as uint32 (each step cast back, as in ``_mt_twist``)."""
    y = np.uint32(y ^ (y >> _S11))
    y = np.uint32(y ^ ((y << _S7) & _B))
    y = np.uint32(y ^ ((y << _S15) & _C))
    return np.uint32(y ^ (y >> _S18))


def mt_state(generator: torch.Generator) -> np.ndarray | None:
    """The generator's mt19937 state as the compiled draws read it, (626,) uint32: its 624 words (in torch's state
    uint64 words holding 32 bits each), then the number of words left + 1 and the next word's index; None where the
    generator is not torch's CPU mt19937 (``is_mt``). ``set_mt_state`` writes it back."""
    state = generator.get_state()
    if not _mt_layout(generator, state):
        return None
    mt = np.empty(_MT_N + 2, np.uint32)
    mt_read(state.numpy().view(np.uint32), mt)
    return mt


def set_mt_state(generator: torch.Generator, mt: np.ndarray) -> None:
    """Put the state ``mt`` (``mt_state``'s layout, advanced by the draws) back into the generator: its words,
    words left and next index into torch's layout, the rest of the generator's state as it was."""
    state = generator.get_state()
    mt_write(mt, state.numpy().view(np.uint32))
    generator.set_state(state)


def is_mt(generator: torch.Generator) -> bool:
    """Whether the generator is torch's CPU mt19937, its state in the layout the draws read."""
    return _mt_layout(generator, generator.get_state())


def _mt_layout(generator: torch.Generator, state: torch.Tensor) -> bool:
    """Whether ``state``, the generator's, is torch's CPU mt19937 layout."""
    return generator.device.type == "cpu" and state.numel() == _MT_STATE_BYTES


@njit(cache=True)
def mt_read(w, mt):
    """mt (626,) uint32 <- the words, words left + 1 and next index of torch's state w (its bytes as uint32), each
    the low half of its field. (Indices into the state's bytes viewed as 32-bit words in NumPy, not views of other
    types in numba: those took over a second to compile, on a new process's first call.)"""
    for i in range(_MT_N):
        mt[i] = w[_WORDS + 2 * i]
    mt[_MT_N], mt[_MT_N + 1] = w[_LEFT], w[_NEXT]


@njit(cache=True)
def mt_write(mt, w):
    """torch's state w (its bytes as uint32) <- mt's words, words left + 1 and next index, into the low half of each
    field (the high halves are zero: 32-bit words, a count and an index below 625)."""
    for i in range(_MT_N):
        w[_WORDS + 2 * i] = mt[i]
    w[_LEFT], w[_NEXT] = mt[_MT_N], mt[_MT_N + 1]


@njit(cache=True)
def _mt_draw(mt, out, high):
    """out <- the next len(out) draws of torch.randint(high, ...) from the mt19937 state ``mt`` (``mt_state``),
    advanced in place: each draw is the next tempered word modulo high (its low bits where high is a power of two,
    else the remainder by a float reciprocal and one correction, exact for words < 2^32)."""
    words = mt[:_MT_N]
    left, at = np.int64(mt[_MT_N]), np.int64(mt[_MT_N + 1])
    inv = 1.0 / high
    pow2 = (high & (high - 1)) == 0
    mask = np.uint32(high - 1)
    k, n = 0, out.shape[0]
    while k < n:
        if left == 1:  # every word used: the next 624
            _mt_next(words)
            left, at = _MT_N + 1, 0
        c = min(left - 1, n - k)
        w, o = words[at:at + c], out[k:k + c]  # slices: unit-stride loops (indices fixed up per entry would gather)
        if pow2:  # the remainder is the word's low bits: integer vector code (AVX2 has no vector int64 <-> float64)
            for i in range(c):
                o[i] = np.uint32(_mt_temper(w[i]) & mask)
        else:
            for i in range(c):
                y = np.int64(_mt_temper(w[i]))
                q = np.int64(np.float64(y) * inv)
                r = y - q * high
                o[i] = r - high if r >= high else r
        left -= c
        at += c
        k += c
    mt[_MT_N], mt[_MT_N + 1] = np.uint32(left), np.uint32(at)


@njit(cache=True)
def _mt_randint(w, out, high):
    """out <- the next len(out) draws of torch.randint(high, ...) from torch's state w (its bytes as uint32),
    advanced in place (``_mt_draw`` on its words as ``mt_read`` reads them)."""
    mt = np.empty(_MT_N + 2, np.uint32)
    mt_read(w, mt)
    _mt_draw(mt, out, high)
    mt_write(mt, w)


def randint_(out: torch.Tensor, high: int, generator: torch.Generator) -> torch.Tensor:
    """``torch.randint(high, out.shape, generator=generator, out=out)``: the same numbers, and the generator
    left in the same state, drawn by ``_mt_randint`` (several times faster) for a CPU generator and a
    contiguous int64 ``out``; by torch otherwise."""
    state = generator.get_state()
    if not _mt_layout(generator, state) or out.dtype != torch.int64 or not out.is_contiguous() or not 0 < high < 2**31:
        return torch.randint(high, out.shape, generator=generator, out=out)
    _mt_randint(state.numpy().view(np.uint32), out.numpy().reshape(-1), high)
    generator.set_state(state)
    return out


@njit(cache=True, nogil=True)
def draw_steps(states, xs, high):
    """xs (k, S, B, L) <- k steps of batches: member s's tokens of each step drawn from its mt19937 state
    ``states[s]`` ((S, 626) uint32, ``mt_state``'s layout, advanced in place), as ``randint_``; xs of any integer type
    that holds tokens below ``high`` (the compiled step's ``engine.step.TOKENS``)."""
    k, S, B, L = xs.shape
    for i in range(k):
        for s in range(S):
            _mt_draw(states[s], xs[i, s].reshape(B * L), high)
