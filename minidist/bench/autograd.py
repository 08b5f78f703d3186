"""How fast is minidist's autograd? One training step against PyTorch on the CPU.

    python -m minidist.bench.autograd                 # 1 thread, MLP 784-1024-1024-10, batch 256
    python -m minidist.bench.autograd --threads 2 --steps 30

Two measurements, each for minidist and (when installed) PyTorch in the same
run, with the same weights, data and number of threads:

1. One training step of an MLP (forward, cross-entropy, backward, Adam step)
   in float32: warm-up steps first, then the median of ``--steps`` timed
   steps, also split into its three phases. The matrix products (about
   6 * batch * weights flops per step) run in BLAS for both libraries, so the
   ratio shows what the rest costs: the Python graph, the element-wise
   numpy passes of the optimiser and the loss.
2. The Python overhead per operation: a chain of 100 adds and multiplies on
   2x2 tensors, forward and backward. Such tiny arrays cost nothing to
   compute, so the time per operation is the bookkeeping of recording a node
   and walking it back.

BLAS reads its thread count when it loads, so the benchmark restarts itself
with OMP_NUM_THREADS and OPENBLAS_NUM_THREADS set to ``--threads`` when they
differ. PyTorch is optional (``pip install minidist[bench]``) and never
imported by the library itself.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

import minidist as md
from minidist.nn import MLP
from minidist.nn.functional import cross_entropy
from minidist.optim import Adam

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
PHASES = ("forward", "backward", "optimizer")


def median_seconds(fn: Callable[[], object], steps: int, warmup: int) -> float:
    """Median wall time of ``steps`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def make_batch(sizes: list[int], batch: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    return x, rng.integers(0, sizes[-1], size=batch)


def minidist_step(model: MLP, x: np.ndarray, y: np.ndarray) -> dict[str, Callable]:
    """The three phases of one minidist training step, as functions run in order."""
    opt = Adam(model.parameters(), lr=1e-3)
    graph = {}

    def forward():
        opt.zero_grad()
        graph["loss"] = cross_entropy(model(x), y)

    return dict(forward=forward, backward=lambda: graph.pop("loss").backward(),
                optimizer=opt.step)


def torch_step(model: MLP, x: np.ndarray, y: np.ndarray) -> dict[str, Callable]:
    """The same three phases in PyTorch, starting from the same weights."""
    import torch

    layers = []
    for module in model:
        if isinstance(module, md.nn.Linear):
            linear = torch.nn.Linear(module.in_features, module.out_features)
            with torch.no_grad():
                linear.weight.copy_(torch.from_numpy(module.weight.numpy()))
                linear.bias.copy_(torch.from_numpy(module.bias.numpy()))
            layers.append(linear)
        else:
            layers.append(torch.nn.ReLU())
    net = torch.nn.Sequential(*layers)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    graph = {}

    def forward():
        opt.zero_grad()
        graph["loss"] = torch.nn.functional.cross_entropy(net(tx), ty)

    return dict(forward=forward, backward=lambda: graph.pop("loss").backward(),
                optimizer=opt.step)


def time_phases(libraries: dict[str, dict[str, Callable]], steps: int,
                warmup: int) -> dict[str, dict[str, float]]:
    """Median seconds of each phase and of the whole step, per library.

    The libraries take turns step by step, so a burst of background load on a
    shared machine slows both alike instead of skewing the ratio.
    """
    for _ in range(warmup):
        for phases in libraries.values():
            for name in PHASES:
                phases[name]()
    times = {lib: {name: [] for name in (*PHASES, "step")} for lib in libraries}
    for _ in range(steps):
        for lib, phases in libraries.items():
            step_start = time.perf_counter()
            for name in PHASES:
                start = time.perf_counter()
                phases[name]()
                times[lib][name].append(time.perf_counter() - start)
            times[lib]["step"].append(time.perf_counter() - step_start)
    return {lib: {name: statistics.median(values) for name, values in phases.items()}
            for lib, phases in times.items()}


def op_chain(tensor: Callable, length: int = 100) -> Callable[[], None]:
    """Forward and backward through ``length`` alternating adds and multiplies of 2x2 tensors."""
    a = tensor(np.full((2, 2), 0.5, dtype=np.float32))
    b = tensor(np.full((2, 2), 0.99, dtype=np.float32))

    def run():
        z = a
        for i in range(length):
            z = z * b if i % 2 else z + a
        z.sum().backward()
        a.grad = b.grad = None

    return run


def overhead_per_op(tensor: Callable, length: int = 100, steps: int = 50) -> float:
    """Microseconds per operation (forward and backward) on the 2x2 chain."""
    return median_seconds(op_chain(tensor, length), steps, warmup=5) / length * 1e6


def ensure_threads(threads: int, argv: list[str]) -> None:
    """Restart this benchmark with the thread variables set, unless they already are."""
    if all(os.environ.get(name) == str(threads) for name in THREAD_VARIABLES):
        return
    env = {**os.environ, **{name: str(threads) for name in THREAD_VARIABLES}}
    os.execve(sys.executable, [sys.executable, "-m", "minidist.bench.autograd", *argv], env)


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description="minidist vs PyTorch: one MLP training step")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sizes", default="784,1024,1024,10", help="layer sizes of the MLP")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20, help="timed steps (median reported)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-torch", action="store_true", help="time minidist only")
    args = parser.parse_args(argv)
    ensure_threads(args.threads, argv)

    sizes = [int(s) for s in args.sizes.split(",")]
    x, y = make_batch(sizes, args.batch)
    model = MLP(sizes, rng=0)
    libraries = {"minidist": minidist_step(model, x, y)}
    overheads = {"minidist": lambda a: md.Tensor(a, requires_grad=True)}
    try:
        if args.no_torch:
            raise ImportError
        import torch
    except ImportError:
        print("PyTorch not installed (pip install minidist[bench]): timing minidist only")
    else:
        torch.set_num_threads(args.threads)
        libraries["torch"] = torch_step(model, x, y)
        overheads["torch"] = lambda a: torch.tensor(a, requires_grad=True)
    results = time_phases(libraries, args.steps, args.warmup)
    for library, make_tensor in overheads.items():
        results[library]["us_per_op"] = overhead_per_op(make_tensor)

    print(f"MLP {'-'.join(map(str, sizes))}, batch {args.batch}, float32, "
          f"{args.threads} thread(s), median of {args.steps} steps")
    print(f"{'':10s}" + "".join(f"{name:>12s}" for name in (*PHASES, "step", "us/op")))
    for library, times in results.items():
        cells = [f"{times[name] * 1e3:9.2f} ms" for name in (*PHASES, "step")]
        print(f"{library:10s}" + "".join(f"{cell:>12s}" for cell in cells)
              + f"{times['us_per_op']:9.2f} us")
    if "torch" in results:
        ratio = results["minidist"]["step"] / results["torch"]["step"]
        overhead = results["minidist"]["us_per_op"] / results["torch"]["us_per_op"]
        print(f"step time minidist / torch: {ratio:.2f}x   overhead per op: {overhead:.2f}x")
    return results


if __name__ == "__main__":
    main()
