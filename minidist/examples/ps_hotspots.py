"""Hot spots on a parameter server, and two remedies; then Hogwild against the server.

    python -m minidist.examples.ps_hotspots --plot hotspots.png
    python -m minidist.examples.ps_hotspots --race          # Hogwild vs the server, 2 workers

A recommendation model (matrix factorisation, ``minidist.parallel.ps.hotspots``)
trains on ratings whose user and item ids follow Zipf's law, through S
servers holding key ranges, under BSP, on in-process ranks (the transport
counts every byte). Four runs: plain ranges; the hottest keys replicated on
the workers; ranges cut by measured load; both. For each, the bytes each
server moved (received + sent) as a table and a bar chart, the busiest
server against the mean, and the trained model's RMSE, which is the same in
all four (the remedies move work, not arithmetic).

``--race`` trains the same problem asynchronously with Hogwild (processes
sharing memory) and with a parameter server (MPI processes: one server, W
workers), the same batches each, and prints updates per second and the RMSE
after equal updates (``minidist.parallel.ps.sparse_race``).
"""

from __future__ import annotations

import argparse

import numpy as np
from tqdm import tqdm

from minidist.comm import LocalCluster
from minidist.examples.options import image_file, integer
from minidist.parallel.ps.hotspots import assemble, mf_layout, ratings, rmse, train_mf
from minidist.parallel.ps.sparse_race import race
from minidist.viz.figure import pyplot, save

SCHEMES = {"plain ranges": (0, False), "hot keys replicated": (256, False),
           "ranges by load": (0, True), "both": (256, True)}


def hot_spot_runs(servers: int, workers: int, steps: int, seed: int,
                  progress: bool = True) -> tuple[dict[str, tuple[np.ndarray, float]], str]:
    """{scheme: (bytes per server, RMSE)} and the table as text."""
    data = ratings(num_users=4000, num_items=4000, count=50_000, seed=seed)
    layout = mf_layout(data, 8)
    runs = {}
    for name, (hot, balance) in tqdm(SCHEMES.items(), desc="schemes", disable=not progress):
        cluster = LocalCluster(servers + workers)
        results = cluster.run(lambda c, h=hot, b=balance: train_mf(
            c, data, steps=steps, hot=h, balance=b, servers=servers, seed=seed), timeout=600)
        load = np.array([cluster.stats[s].bytes_recv + cluster.stats[s].bytes_sent
                         for s in range(servers)])
        runs[name] = (load, rmse(data, layout, assemble(results, layout), 8))
    lines = [f"{'scheme':>20}  " + "  ".join(f"server {s} MB" for s in range(servers))
             + "  busiest/mean       RMSE"]
    for name, (load, error) in runs.items():
        lines.append(f"{name:>20}  " + "  ".join(f"{b / 1e6:11.2f}" for b in load)
                     + f"  {load.max() / load.mean():12.2f}  {error:.9f}")
    return runs, "\n".join(lines)


def plot(runs: dict[str, tuple[np.ndarray, float]], path: str | None):
    """Bars of each scheme's load per server; saved to ``path`` (and closed), the figure
    returned."""
    fig, ax = pyplot().subplots(figsize=(8, 4))
    width = 0.8 / len(runs)
    for k, (name, (load, _)) in enumerate(runs.items()):
        ax.bar(np.arange(load.size) + k * width, load / 1e6, width, label=name)
    ax.set_xticks(np.arange(load.size) + 0.4 - width / 2,
                  [f"server {s}" for s in range(load.size)])
    ax.set_ylabel("MB moved (received + sent)")
    ax.set_title("Load per server: power-law ids on key ranges", pad=22)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(runs), frameon=False,
              fontsize="small")  # above the bars: inside, it hid one of two servers' bars
    if path is not None:
        save(fig, path)
    return fig


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=integer(1), default=4)
    parser.add_argument("--workers", type=integer(1), default=4)
    parser.add_argument("--steps", type=integer(1), default=30)
    parser.add_argument("--seed", type=integer(0), default=0)
    parser.add_argument("--plot", type=image_file, help="save the load chart here (PNG)")
    parser.add_argument("--race", action="store_true",
                        help="Hogwild against a parameter server instead")
    parser.add_argument("--race-steps", type=integer(1), default=200)
    args = parser.parse_args(argv)
    if args.race and args.plot:
        parser.error("--plot draws the hot-spot load chart; --race prints its figures only")
    if args.race:
        untrained, results = race(workers=min(args.workers, 2), steps=args.race_steps,
                                  seed=args.seed)
        print(f"untrained RMSE {untrained:.5f}")
        for r in results:
            print(f"{r.name:>17}: {r.updates} updates in {r.seconds:.2f} s = "
                  f"{r.updates_per_second:,.0f} updates/s, RMSE {r.rmse:.5f}")
        return {"untrained": untrained, "results": results}
    runs, table = hot_spot_runs(args.servers, args.workers, args.steps, args.seed)
    print(table)
    plain, both = runs["plain ranges"][0], runs["both"][0]
    print(f"busiest server: {plain.max() / 1e6:.2f} MB plain, {both.max() / 1e6:.2f} MB with "
          f"both remedies ({plain.max() / both.max():.1f}x less); same RMSE")
    if args.plot:
        plot(runs, args.plot)
        print(f"chart saved to {args.plot}")
    return runs


if __name__ == "__main__":
    main()
