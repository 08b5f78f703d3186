"""Every allreduce from 2 to 4096 ranks on a network you choose: the modelled times, and a plot.

    python -m minidist.bench.scaling                       # 25 GB/s links, 5 µs latency
    python -m minidist.bench.scaling --bandwidth 100e9 --latency 2e-6 --sizes 8,1Mi,256Mi
    python -m minidist.bench.scaling --plot scaling.png --simulate-up-to 256

For each vector size and P = 2, 4, ..., ``--max-ranks`` this prints the time of
every algorithm (``comm.allreduce``'s, without the agreement check) as the
cost model gives it (``comm.cost.predict``), the fastest marked ``*``. The
model *is* the simulator's clock: on the in-process transport each algorithm's
modelled time equals the prediction to rounding at any P (``tests/test_cost.py``
checks a grid, ``bench/simulator.py`` a thousand ranks), so the table is what
the simulator would print, without running P ranks. ``--simulate-up-to P``
runs them anyway, up to that P (where the vectors fit in 1 GiB in all), and
marks each row it checked: ``=`` when the clock equalled the model.

The network is the α-β-γ model: a message of n bytes costs
``latency + n / bandwidth``, reducing n bytes ``n / reduce-bandwidth``. Every
link is independent (a rank sends and receives at once, on links of its
own): real clusters share switches and a host's memory, so read the table
as the algorithms' shape, not a promise.
"""

from __future__ import annotations

import argparse

import numpy as np

from minidist.comm import LocalCluster, NetworkModel, allreduce
from minidist.comm.cost import predict
from minidist.util.arguments import image_file, integer, listing, number
from minidist.util.arguments import size as byte_size

ALGORITHMS = ("naive", "ps", "ring", "tree", "double_tree", "recursive_doubling")
SIMULATION_BYTES = 1 << 30  # all ranks' vectors together, when simulating


def sweep(network: NetworkModel, sizes: list[int], ranks: list[int],
          algorithms: tuple[str, ...] = ALGORITHMS) -> dict[int, dict[str, list[float]]]:
    """``{size: {algorithm: [modelled seconds at each P of ranks]}}`` for float64 vectors
    of ``size`` bytes."""
    return {size: {name: [predict(name, p, size, 8, network).time for p in ranks]
                   for name in algorithms} for size in sizes}


def simulated_equals_model(network: NetworkModel, size: int, p: int, algorithm: str) -> bool:
    """Run the allreduce on ``p`` in-process ranks: does its clock equal the model?"""
    cluster = LocalCluster(p, network=network)
    cluster.run(lambda c: allreduce(np.ones(size // 8), c, algorithm=algorithm, check=False),
                timeout=None)
    clock = max(s.clock for s in cluster.stats)
    return bool(np.isclose(clock, predict(algorithm, p, size, 8, network).time, rtol=1e-9))


def format_seconds(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def float64_size(text: str) -> int:
    """A :func:`~minidist.util.arguments.size` of whole float64 values (a multiple of 8)."""
    nbytes = byte_size(text)
    if nbytes % 8:
        raise argparse.ArgumentTypeError(f"size {text!r}: a multiple of 8 bytes (float64)")
    return nbytes


def print_table(table: dict[int, dict[str, list[float]]], ranks: list[int],
                checked: dict[tuple[int, int], bool]) -> None:
    for size, times in table.items():
        names = list(times)
        print(f"\nallreduce of {size} bytes (float64)")
        print(f"{'P':>6}  " + "".join(f"{name:>20}" for name in names) + "  simulated")
        for k, p in enumerate(ranks):
            best = min(times[name][k] for name in names)
            cells = "".join(f"{format_seconds(times[name][k]):>18}"
                            f"{' *' if times[name][k] == best else '  '}" for name in names)
            check = checked.get((size, p))
            mark = "" if check is None else ("=" if check else "DIFFERS")
            print(f"{p:>6}  {cells}  {mark}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=number(least=0), default=5e-6,
                        help="α, seconds per message")
    parser.add_argument("--bandwidth", type=number(above=0), default=25e9,
                        help="link bytes per second")
    parser.add_argument("--reduce-bandwidth", type=number(above=0),
                        default=1 / NetworkModel().gamma,
                        help="bytes reduced per second (default: NetworkModel's γ)")
    parser.add_argument("--sizes", type=listing(float64_size), default=[8, 64 << 10, 64 << 20],
                        help="bytes, e.g. 8,64Ki,64Mi")
    parser.add_argument("--max-ranks", type=integer(2), default=4096)
    parser.add_argument("--simulate-up-to", type=integer(0), default=0, metavar="P",
                        help="also run the simulator up to P ranks and compare")
    parser.add_argument("--plot", type=image_file, default=None,
                        help="save the plot as this PNG")
    args = parser.parse_args(argv)
    network = NetworkModel(alpha=args.latency, beta=1 / args.bandwidth,
                           gamma=1 / args.reduce_bandwidth)
    ranks = [1 << k for k in range(1, args.max_ranks.bit_length()) if 1 << k <= args.max_ranks]
    table = sweep(network, args.sizes, ranks)
    checked = {(size, p): all(simulated_equals_model(network, size, p, name)
                              for name in ALGORITHMS)
               for size in args.sizes for p in ranks
               if p <= args.simulate_up_to and size * p <= SIMULATION_BYTES}
    print(f"network: {args.latency * 1e6:g} us latency, {args.bandwidth / 1e9:g} GB/s links, "
          f"reductions at {args.reduce_bandwidth / 1e9:g} GB/s; * the fastest")
    print_table(table, ranks, checked)
    if args.plot:
        from minidist.viz.scaling import plot_scaling

        plot_scaling(table, ranks, path=args.plot)
        print(f"\nplot: {args.plot}")


if __name__ == "__main__":
    main()
