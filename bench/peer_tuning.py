"""How the benchmarks run their Python peers as a careful user would, following PyTorch's CPU
performance guide: glibc's malloc kept from handing freed memory back to the kernel (page faults
are expensive on these machines: Python DDP went from 46 to 99-111 img/s with it), one intra-op
thread per process where several processes share the cores, and processes pinned to their own
cores. Each benchmark runs its peer both ways, in the same run, and its `*_ratio` figures are
against the tuned one."""
import os

# glibc's knobs for what jemalloc or tcmalloc would do: keep freed blocks in the heap instead of
# unmapping them (mmap threshold) or trimming the heap top (trim threshold) after every step.
MALLOC = {"MALLOC_TRIM_THRESHOLD_": str(1 << 34), "MALLOC_MMAP_THRESHOLD_": str(1 << 25),
          "MALLOC_TOP_PAD_": str(1 << 30)}


def tuned_env(base=None, threads=None):
    """`base` (default: this process's environment) with the allocator tuned and, when given,
    OpenMP limited to `threads` per process."""
    env = dict(os.environ if base is None else base, **MALLOC)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def untuned_env(base=None):
    """`base` without any of the tuning, as a user who changed nothing runs."""
    env = dict(os.environ if base is None else base)
    for key in (*MALLOC, "OMP_NUM_THREADS"):
        env.pop(key, None)
    return env
