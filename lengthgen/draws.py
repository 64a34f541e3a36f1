"""Token draws of ``torch.randint`` from a CPU generator's own state, compiled: the same numbers, and the generator
left in the same state, several times faster than torch's call for the small batches of training.

torch's CPU generator is mt19937; ``randint_`` draws into a tensor (``task.TrainStream``), ``draw_steps`` draws many
steps' batches of many members in one compiled call (``tables.TableStep.run``, before a stretch of steps: on a second
thread ahead of a lone model, on the path of each thread that trains a group of an ensemble's members).
tests/test_fused.py checks the draws against ``torch.randint`` bitwise.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit

# torch's CPU generator (mt19937) as ``Generator.get_state`` lays it out: the number of words left + 1
# (int32 at byte 8), the next word (uint64 at byte 16), the 624 words (uint64 each, from byte 24)
_MT_STATE_BYTES, _MT_N, _MT_M = 5056, 624, 397
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


@njit(cache=True)
def _mt_load(state, words, place):
    """words (624,) uint32 <- the generator state's words (``state``: uint8, ``Generator.get_state``'s layout, whose
    uint64 words hold 32 bits: in uint32 a vector holds twice as many), place (2,) int64 <- its (words left + 1, next
    word)."""
    state_words = state[24:24 + 8 * _MT_N].view(np.uint64)
    for i in range(_MT_N):
        words[i] = np.uint32(state_words[i])
    place[0] = state[8:12].view(np.int32)[0]
    place[1] = state[16:24].view(np.uint64)[0]


@njit(cache=True)
def _mt_store(state, words, place):
    """The generator state ``state`` <- words and place, as ``_mt_load`` read them."""
    state_words = state[24:24 + 8 * _MT_N].view(np.uint64)
    for i in range(_MT_N):
        state_words[i] = np.uint64(words[i])
    state[8:12].view(np.int32)[0] = place[0]
    state[16:24].view(np.uint64)[0] = place[1]


@njit(cache=True)
def _mt_draw(words, place, out, high):
    """out <- the next len(out) draws of torch.randint(high, ...) from mt19937's words and place (``_mt_load``),
    advanced in place: each draw is the next tempered word modulo high (its low bits where high is a power of two,
    else the remainder by a float reciprocal and one correction, exact for words < 2^32)."""
    left, at = place[0], place[1]
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
    place[0], place[1] = left, at


@njit(cache=True)
def _mt_randint(state, out, high):
    """out <- the next len(out) draws of torch.randint(high, ...) from the generator state ``state`` (uint8,
    ``Generator.get_state``'s layout), advanced in place (``_mt_draw`` on its words in uint32)."""
    words, place = np.empty(_MT_N, np.uint32), np.empty(2, np.int64)
    _mt_load(state, words, place)
    _mt_draw(words, place, out, high)
    _mt_store(state, words, place)


def randint_(out: torch.Tensor, high: int, generator: torch.Generator) -> torch.Tensor:
    """``torch.randint(high, out.shape, generator=generator, out=out)``: the same numbers, and the generator
    left in the same state, drawn by ``_mt_randint`` (several times faster) for a CPU generator and a
    contiguous int64 ``out``; by torch otherwise."""
    state = generator.get_state()
    if (generator.device.type != "cpu" or state.numel() != _MT_STATE_BYTES or out.dtype != torch.int64
            or not out.is_contiguous() or not 0 < high < 2**31):
        return torch.randint(high, out.shape, generator=generator, out=out)
    _mt_randint(state.numpy(), out.numpy().reshape(-1), high)
    generator.set_state(state)
    return out


def mt_state(generator: torch.Generator) -> np.ndarray | None:
    """The generator's state as ``_mt_load`` reads it (uint8, ``Generator.get_state``'s layout, a copy), or
    None where it cannot (not torch's CPU mt19937 layout)."""
    state = generator.get_state()
    if generator.device.type != "cpu" or state.numel() != _MT_STATE_BYTES:
        return None
    return state.numpy()


@njit(cache=True, nogil=True)
def draw_steps(states, xs, high):
    """xs (k, S, B, L) <- k steps of batches: member s's tokens of each step drawn from its mt19937 state
    ``states[s]`` (advanced in place), as ``_mt_randint``; xs of any integer type that holds tokens below ``high``
    (the compiled step's ``engine.step.TOKENS``). Each state's words are read into uint32 once for the call
    (``_mt_load``) and written back once after it.

    One batch of the default task (256 x 32 tokens, V 16, into the step's uint16; 100 batches a call, min of seven;
    an Intel Xeon, three rounds alternated): in torch's uint64 words 4.07-4.69 us natively, 6.01-6.87 us as AVX2;
    in uint32 words 2.62-2.77 and 3.37-3.48 us read and written back for each batch; read once a call, 2.19-2.38
    and 2.81-3.01 us against 2.33-2.60 and 3.04-3.23 us for each batch (three more rounds alternated, a quicker
    hour)."""
    k, S, B, L = xs.shape
    words, place = np.empty((S, _MT_N), np.uint32), np.empty((S, 2), np.int64)
    for s in range(S):
        _mt_load(states[s], words[s], place[s])
    for i in range(k):
        for s in range(S):
            _mt_draw(words[s], place[s], xs[i, s].reshape(B * L), high)
    for s in range(S):
        _mt_store(states[s], words[s], place[s])
