"""How fast is minidist's autograd? One training step against PyTorch, on the CPU or a GPU.

    python -m minidist.bench.autograd                 # 1 thread, MLP 784-1024-1024-10, batch 256
    python -m minidist.bench.autograd --threads 2 --steps 30
    python -m minidist.bench.autograd --device cuda   # the GPU: MLP 4096-4096-4096-4096-10, 2048

Two measurements, each for minidist and (when installed) PyTorch in the same
run, with the same weights, data and number of threads, on the same device:

1. One training step of an MLP (forward, cross-entropy, backward, Adam step)
   in float32: warm-up steps first, then the median of ``--steps`` timed
   steps, also split into its three phases. The matrix products (about
   6 * batch * weights flops per step) run in BLAS (cuBLAS on a GPU) for both
   libraries, so the ratio shows what the rest costs: the Python graph, the
   element-wise passes of the optimiser and the loss. Targets: minidist's
   step <= 1.25x PyTorch's on the CPU, <= 1.3x on a GPU; printed met or missed.
2. The overhead per operation: a chain of 100 adds and multiplies on 2x2
   tensors, forward and backward. Such tiny arrays cost nothing to compute,
   so the time per operation is the bookkeeping of recording a node and
   walking it back (on a GPU, with a kernel launch per operation).

``--device cuda`` computes on the GPU (minidist through cupy, PyTorch through
torch.cuda). A GPU runs asynchronously, so each library waits for its queue
(cupy's device synchronize, ``torch.cuda.synchronize``) before the clock is
read. ``--device strict`` runs a small MLP on the CI guard's stand-in (numpy
on the CPU behind cupy's refusals): a smoke test that the device path works,
whose times mean nothing.

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
from typing import Any

import numpy as np

import minidist as md
from minidist import backend
from minidist.examples.options import DEVICES, choose_device
from minidist.nn import MLP
from minidist.nn.functional import cross_entropy
from minidist.optim import Adam
from minidist.util.arguments import integer, listing

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
PHASES = ("forward", "backward", "optimizer")
# per device: the MLP's sizes, the batch, and the target for minidist's step / PyTorch's
CONFIGS = {
    "cpu": dict(sizes=[784, 1024, 1024, 10], batch=256, target=1.25),
    "cuda": dict(sizes=[4096, 4096, 4096, 4096, 10], batch=2048, target=1.3),
    "strict": dict(sizes=[64, 32, 10], batch=16, target=None),  # a smoke test: no timing target
}


def median_seconds(fn: Callable[[], object], steps: int, warmup: int,
                   sync: Callable[[], None] = lambda: None) -> float:
    """Median wall time of ``steps`` calls of ``fn`` after ``warmup`` untimed ones;
    ``sync`` waits for the device's queue before each reading of the clock."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(steps):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def make_batch(sizes: list[int], batch: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    return x, rng.integers(0, sizes[-1], size=batch)


def minidist_sync() -> Callable[[], None]:
    """Wait for the GPU's queue (cupy's, through the backend); nothing to wait for elsewhere."""
    if backend.get_device() != "cuda":
        return lambda: None
    return backend.xp().cuda.Device().synchronize


def minidist_step(model: MLP, x: np.ndarray, y: np.ndarray) -> dict[str, Callable]:
    """The three phases of one minidist training step, as functions run in order."""
    opt = Adam(model.parameters(), lr=1e-3)
    x, y = backend.xp().asarray(x), backend.xp().asarray(y)  # the batch to the device, once
    graph = {}

    def forward():
        opt.zero_grad()
        graph["loss"] = cross_entropy(model(x), y)

    return dict(forward=forward, backward=lambda: graph.pop("loss").backward(),
                optimizer=opt.step)


def torch_step(model: MLP, x: np.ndarray, y: np.ndarray, device: str) -> dict[str, Callable]:
    """The same three phases in PyTorch on ``device``, starting from the same weights."""
    import torch

    layers = []
    for module in model:
        if isinstance(module, md.nn.Linear):
            linear = torch.nn.Linear(module.in_features, module.out_features)
            with torch.no_grad():  # explicit host copies of minidist's weights
                linear.weight.copy_(torch.from_numpy(module.weight.numpy()))
                linear.bias.copy_(torch.from_numpy(module.bias.numpy()))
            layers.append(linear)
        else:
            layers.append(torch.nn.ReLU())
    net = torch.nn.Sequential(*layers).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    tx, ty = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    graph = {}

    def forward():
        opt.zero_grad()
        graph["loss"] = torch.nn.functional.cross_entropy(net(tx), ty)

    return dict(forward=forward, backward=lambda: graph.pop("loss").backward(),
                optimizer=opt.step)


def time_phases(libraries: dict[str, dict[str, Callable]], steps: int, warmup: int,
                syncs: dict[str, Callable[[], None]]) -> dict[str, dict[str, float]]:
    """Median seconds of each phase and of the whole step, per library.

    The libraries take turns step by step, so a burst of background load on a
    shared machine slows both alike instead of skewing the ratio. Each waits
    for its device (``syncs``) before the clock is read.
    """
    for _ in range(warmup):
        for phases in libraries.values():
            for name in PHASES:
                phases[name]()
    times = {lib: {name: [] for name in (*PHASES, "step")} for lib in libraries}
    for _ in range(steps):
        for lib, phases in libraries.items():
            sync = syncs[lib]
            sync()
            step_start = time.perf_counter()
            for name in PHASES:
                start = time.perf_counter()
                phases[name]()
                sync()
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


def overhead_per_op(tensor: Callable, sync: Callable[[], None], length: int = 100,
                    steps: int = 50) -> float:
    """Microseconds per operation (forward and backward) on the 2x2 chain."""
    return median_seconds(op_chain(tensor, length), steps, warmup=5, sync=sync) / length * 1e6


def ensure_threads(threads: int, argv: list[str]) -> None:
    """Restart this benchmark with the thread variables set, unless they already are."""
    if all(os.environ.get(name) == str(threads) for name in THREAD_VARIABLES):
        return
    env = {**os.environ, **{name: str(threads) for name in THREAD_VARIABLES}}
    os.execve(sys.executable, [sys.executable, "-m", "minidist.bench.autograd", *argv], env)


def import_torch(device: str, threads: int) -> Any:
    """PyTorch, if installed and able to run on ``device``; else None, having said why."""
    try:
        import torch
    except ImportError:
        print("PyTorch not installed (pip install minidist[bench]): minidist's figures alone")
        return None
    if device == "cuda" and not torch.cuda.is_available():
        print("PyTorch sees no GPU (a CPU-only build?): minidist's figures alone")
        return None
    torch.set_num_threads(threads)
    return torch


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description="minidist vs PyTorch: one MLP training step")
    parser.add_argument("--device", choices=DEVICES, default=None,
                        help="cpu (default), cuda (the GPU, PyTorch on it too), or strict "
                             "(the CI guard's stand-in: a small smoke test, its times meaningless)")
    parser.add_argument("--threads", type=integer(1), default=1)
    parser.add_argument("--sizes", type=listing(integer(1)), default=None,
                        help="layer sizes of the MLP (default: per device, see CONFIGS)")
    parser.add_argument("--batch", type=integer(1), default=None, help="default: per device")
    parser.add_argument("--steps", type=integer(1), default=20,
                        help="timed steps (median reported)")
    parser.add_argument("--warmup", type=integer(0), default=3)
    parser.add_argument("--no-torch", action="store_true", help="time minidist only")
    args = parser.parse_args(argv)
    ensure_threads(args.threads, argv)
    device = choose_device(parser, args.device)
    config = CONFIGS[device]

    sizes = args.sizes or config["sizes"]
    batch = args.batch or config["batch"]
    x, y = make_batch(sizes, batch)
    model = MLP(sizes, rng=0)  # on the device chosen above
    libraries = {"minidist": minidist_step(model, x, y)}
    syncs = {"minidist": minidist_sync()}
    tensors = {"minidist": lambda a: md.Tensor(a, requires_grad=True)}
    torch = None if args.no_torch else import_torch(device, args.threads)
    if torch is not None:
        where = "cuda" if device == "cuda" else "cpu"  # strict: PyTorch on the CPU
        libraries["torch"] = torch_step(model, x, y, where)
        syncs["torch"] = torch.cuda.synchronize if where == "cuda" else lambda: None
        tensors["torch"] = lambda a: torch.tensor(a, requires_grad=True, device=where)
    results = time_phases(libraries, args.steps, args.warmup, syncs)
    for library, make_tensor in tensors.items():
        results[library]["us_per_op"] = overhead_per_op(make_tensor, syncs[library])

    threads = "the GPU" if device == "cuda" else f"{args.threads} thread(s)"
    print(f"MLP {'-'.join(map(str, sizes))}, batch {batch}, float32, on {device}, "
          f"{threads}, median of {args.steps} steps")
    if device == "strict":
        print("strict device: a smoke test of the device path (numpy behind cupy's refusals); "
              "its times mean nothing")
    print(f"{'':10s}" + "".join(f"{name:>12s}" for name in (*PHASES, "step", "us/op")))
    for library, times in results.items():
        cells = [f"{times[name] * 1e3:9.2f} ms" for name in (*PHASES, "step")]
        print(f"{library:10s}" + "".join(f"{cell:>12s}" for cell in cells)
              + f"{times['us_per_op']:9.2f} us")
    if "torch" in results:
        ratio = results["minidist"]["step"] / results["torch"]["step"]
        overhead = results["minidist"]["us_per_op"] / results["torch"]["us_per_op"]
        print(f"step time minidist / torch: {ratio:.2f}x   overhead per op: {overhead:.2f}x")
        if config["target"] is not None:
            verdict = "met" if ratio <= config["target"] else "missed"
            print(f"target: step <= {config['target']}x PyTorch's on {device}: {verdict} "
                  f"({ratio:.2f}x)")
    return results


if __name__ == "__main__":
    main()
