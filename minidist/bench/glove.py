"""How fast does GloVe train? Records per second per core, Hogwild's speedup, memory.

    python -m minidist.bench.glove                    # about a minute
    python -m minidist.bench.glove --cooccur text8.npz --dims 50 100

1. **Vectorised trainer** (``minidist.glove``, one process, one
   core): co-occurrence records trained per second at each ``--dims``, on
   two workloads: the default synthetic corpus (a small vocabulary, whose
   tables fit in the CPU caches) and Zipf-distributed random co-occurrences
   over a text8-sized vocabulary (71,290 words: random rows come from main
   memory). ``--cooccur FILE.npz`` adds a file made by
   ``python -m minidist.data.cooccur``. The median epoch of ``--epochs``,
   per wall-clock second and per second of this process's CPU time.
   Targets: >= 0.4 M records/s per core at d=50; glove.c does ~0.64 M per
   thread on the course machine.
2. **Hogwild** (``minidist.glove.hogwild``) on the text8-sized workload:
   epoch time with 1 and with 2 worker processes (the same machinery, so the
   ratio is the speedup; process start-up is excluded and printed apart),
   and the cost reached, beside the one-process trainer's at equal updates.
   Target: >= 1.6x with 2 workers; that needs 2 idle cores (other jobs
   running on the machine take them, and the figure with them).
3. **Memory**: peak resident set size of this process, beside the bytes
   the model and the records need. (The Hogwild workers map the shared
   tables instead of copying them.)
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time

import numpy as np

from minidist import glove
from minidist.data.cooccur import zipf_cooccurrence

TEXT8_VOCAB = 71_290  # words seen >= 5 times in text8


def zipf_records(vocab_size: int = TEXT8_VOCAB, draws: int = 3_000_000,
                 seed: int = 0) -> glove.Records:
    """Distinct (i, j) pairs with Zipfian word ids and a wide range of counts."""
    return glove.Records.from_counts(*zipf_cooccurrence(vocab_size, draws, seed, 20.0))


def synthetic_records(seed: int = 0) -> tuple[glove.Records, int]:
    """The default synthetic corpus's co-occurrences (window 10, min count 5)."""
    from minidist.data.cooccur import count_cooccurrences
    from minidist.data.synthetic_language import generate_corpus
    from minidist.data.vocab import build_vocab

    lines = generate_corpus(seed=seed).lines
    counts = count_cooccurrences(lines, build_vocab(lines, min_count=5), window=10)
    return glove.Records.from_counts(counts.row, counts.col, counts.val), len(counts.words)


def file_records(path: str) -> tuple[glove.Records, int]:
    from minidist.data.cooccur import Cooccurrence

    counts = Cooccurrence.load(path)
    return glove.Records.from_counts(counts.row, counts.col, counts.val), len(counts.words)


def records_per_second(records: glove.Records, vocab_size: int, dim: int, epochs: int,
                       batch_size: int) -> tuple[float, float]:
    """Records per second of the median epoch (one core): per wall second, per CPU second.

    On a machine shared with other jobs the wall figure drops; the CPU one
    (``time.process_time``) counts only the time this process ran.
    """
    model, rng = glove.GloVe.create(vocab_size, dim), np.random.default_rng(0)
    wall, cpu = [], []
    for _ in range(epochs):
        start, start_cpu = time.perf_counter(), time.process_time()
        glove.train_epoch(model, records, rng, batch_size)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return len(records) / statistics.median(wall), len(records) / statistics.median(cpu)


def hogwild_speedup(records: glove.Records, vocab_size: int, dim: int, epochs: int,
                    batch_size: int, rounds: int) -> dict[str, float]:
    """Best epoch time with 1 and 2 workers over ``rounds`` alternating runs, and costs."""
    best = {1: float("inf"), 2: float("inf")}
    startup, costs = 0.0, {}
    for _ in range(rounds):
        for workers in (1, 2):  # alternate, so a change of load hits both alike
            model = glove.GloVe.create(vocab_size, dim)
            run = glove.train_hogwild(model, records, workers, epochs, batch_size, timeout=600)
            best[workers] = min(best[workers], min(run.seconds))
            startup, costs[workers] = max(startup, run.startup_seconds), run.costs[-1]
    sequential = glove.GloVe.create(vocab_size, dim)
    costs[0] = glove.train(sequential, records, epochs, batch_size)[-1]
    return {"one": best[1], "two": best[2], "speedup": best[1] / best[2],
            "startup": startup, "cost_sequential": costs[0], "cost_1": costs[1],
            "cost_2": costs[2]}


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB (Linux reports KB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[50, 100])
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per measurement")
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=2, help="alternating Hogwild runs")
    parser.add_argument("--cooccur", metavar="FILE.npz", help="also time this workload")
    parser.add_argument("--no-hogwild", action="store_true")
    args = parser.parse_args(argv)

    workloads = {"synthetic corpus": synthetic_records()}
    workloads["zipf, text8-sized vocab"] = (zipf_records(), TEXT8_VOCAB)
    if args.cooccur:
        workloads[args.cooccur] = file_records(args.cooccur)
    figures: dict[str, float] = {}
    print("M records/s on one core, per wall second and per CPU second")
    print(f"{'workload':<26} {'words':>7} {'records':>10} {'d':>4} {'wall':>7} {'CPU':>7}")
    for name, (records, vocab_size) in workloads.items():
        for dim in args.dims:
            wall, cpu = records_per_second(records, vocab_size, dim, args.epochs,
                                           args.batch_size)
            figures[f"{name}, d={dim}"], figures[f"{name}, d={dim}, cpu"] = wall, cpu
            print(f"{name:<26} {vocab_size:>7,} {len(records):>10,} {dim:>4} "
                  f"{wall / 1e6:>7.3f} {cpu / 1e6:>7.3f}", flush=True)
    records, vocab_size = workloads["zipf, text8-sized vocab"]
    if not args.no_hogwild:
        dim = args.dims[0]
        h = hogwild_speedup(records, vocab_size, dim, args.epochs, args.batch_size, args.rounds)
        figures.update({f"hogwild {k}": v for k, v in h.items()})
        print(f"\nHogwild, d={dim}, best epoch of {args.epochs} x {args.rounds} rounds "
              f"(start-up {h['startup']:.1f} s excluded)")
        print(f"  1 worker  {h['one']:6.2f} s/epoch   cost after {args.epochs} epochs "
              f"{h['cost_1']:.5f}  (one process, no Hogwild: {h['cost_sequential']:.5f})")
        print(f"  2 workers {h['two']:6.2f} s/epoch   cost after {args.epochs} epochs "
              f"{h['cost_2']:.5f}")
        print(f"  speedup   {h['speedup']:.2f}x (target 1.6x)")
    model_mb = 4 * vocab_size * (max(args.dims) + 1) * 8 / 2**20
    records_mb = sum(a.nbytes for a in vars(records).values()) / 2**20
    figures["peak_rss_mb"] = peak_rss_mb()
    print(f"\nmemory: peak RSS {figures['peak_rss_mb']:.0f} MB; the text8-sized model at "
          f"d={max(args.dims)} takes {model_mb:.0f} MB (tables and AdaGrad sums), its records "
          f"{records_mb:.0f} MB; Hogwild puts both once in shared memory for all workers")
    return figures


if __name__ == "__main__":
    main()
