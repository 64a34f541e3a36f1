"""The CPU engine of training: the one-layer table model's step and stretches of steps as compiled loops
(numba), one call per step (or per stretch) instead of some hundred torch operations.

A step of the table model (``tables.TableStep``) at the book's sizes is latency-bound: a few million
floating-point operations spread over ~110 tensor operations of a few microseconds each. The engine computes the
same numbers in compiled loops, one idea a module:

- ``step``: one step's forward, loss and backward for every member (``table_step``), each block under its equation;
- ``stretch``: n steps of targets, gradient and update (AdamW, gradient or sign descent) in one call (``train_steps``);
- ``numerics``: exp, log1p and dot products as vectorised loops of a fixed order;
- ``matmul``: the step's matrix products by tiles held in registers where numba compiles for AVX2 without AVX-512
  (OpenBLAS's kernels for AVX2 took 1.6-2.9x as long at these sizes on an Intel Xeon run as AVX2), numpy's BLAS
  elsewhere; and, on every machine, the lanewise sums of RoPE's backward through its table (``lane_sums``);
- ``first_compile``: the first compile shared with a helper process (on Linux a fork of this one, made when the
  package is imported), on two cores;
- ``denormals``: subnormal floats flushed to zero on the thread of each compiled call (``flushed``).

The update (``optim.update_step``) and the token draws (``draws``) live outside it: the optimiser and the task use
them without the engine. The functions are compiled on first use and cached on disk (numba's ``cache=True``, in a
folder per version of the compiled modules' sources: ``lengthgen/jit_cache.py``), so only the first run on a machine
pays the compile (float32: about 17 s of CPU after the import; 11.4-11.5 s of wall clock from a process's start on
two cores with the helper of ``first_compile``, in a quick hour of a 2-core AMD EPYC; benchmarks/README.md);
a new process loads them in well under a second.
tests/test_fused.py checks the step against torch (float64 to rounding), tests/test_stretches.py the stretches.
"""
