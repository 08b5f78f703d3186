"""Train GloVe word vectors end to end, then test them.

    python -m minidist.examples.glove                                # synthetic corpus, ~15 s
    python -m minidist.examples.glove --threads 2                    # glove.c's lock-free threads
    python -m minidist.examples.glove --strategy hogwild --ranks 2   # lock-free processes
    python -m minidist.examples.glove --strategy sharded --ranks 2   # dimension split over ranks
    mpirun -n 2 python -m mpi4py -m minidist.examples.glove --strategy ddp  # mpirun's ranks
    python -m minidist.examples.glove --device cuda                  # glove.c's loop on a GPU
    python -m minidist.examples.glove --corpus text8 --window 15 --epochs 15 \\
        --save vectors.txt                                           # needs a network once

The pipeline, one module of minidist per step:

1. Corpus. By default a synthetic language generated from ``--seed``
   (``minidist.data.synthetic_language``): its statistics plant relations
   (country-capital, male-female, plurals, tenses, comparatives), and it
   ships its own analogy and similarity files. Or any UTF-8 text file or
   folder (a line is a document), or ``text8`` (downloaded once, cached).
2. Vocabulary (words seen ``--min-count`` times) and co-occurrence counts
   in a symmetric ``--window``, a pair at distance k adding 1/k
   (``minidist.data.vocab``, ``minidist.data.cooccur``).
3. Training (``minidist.glove``): AdaGrad over the shuffled
   non-zeros, with ``--strategy``: ``records`` (the default: glove.c's own
   loop, record by record, compiled, on ``--threads`` lock-free threads),
   or in mini-batches: ``single`` (one process), ``hogwild`` (``--ranks`` processes updating
   shared memory without locks), ``sharded`` (each rank holds a slice of
   every vector's dimensions: operation parallelism) or ``ddp`` (each rank
   trains on ``--batch-size`` records of every batch of ranks x batch-size,
   and the ranks exchange the gradients of the rows they touched). sharded
   and ddp run ``--ranks`` ranks under mpiexec (``md.launch``), or, started by
   mpirun, its ranks (every one counts the corpus; rank 0 alone prints and
   saves); the others then refuse more than one. ``--threads``: records only.
   ``--device cuda`` trains ``records`` (glove.c's loop as a CUDA kernel,
   ``--threads`` warps) or ``single`` on the GPU (``--device strict``, the CI
   guard's stand-in on the CPU: ``single``): the tables, their AdaGrad sums and
   the records live there; only the costs (once an epoch) and the trained
   vectors come back. The other strategies run on the CPU only: with a device
   they are refused.
4. Tests (``minidist.glove.evaluate``): nearest neighbours, analogy
   accuracy by 3CosAdd, Spearman correlation on a similarity file.

``--x-max``: the paper's 100 suits corpora of billions of tokens, and is
the default for a corpus you give. In the two million tokens of the
synthetic corpus few pairs reach 100, so nearly every record would be
down-weighted; there the default is 10, the value the reference's own demo
script uses on text8 (on the synthetic corpus, after 10 epochs: ~94% of
the analogies with 10, ~91% with 100).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import numpy as np
from tqdm import tqdm

from minidist import backend, glove
from minidist.comm import Communicator, LocalCommunicator, launch, world
from minidist.data.cooccur import Cooccurrence
from minidist.examples import options
from minidist.examples.glove_corpus import count_corpus
from minidist.examples.options import add_device_option, choose_device, integer, number, output_file
from minidist.glove.evaluate import read_analogies, read_similarities
from minidist.util.arguments import path_or

STRATEGIES = ("records", "single", "sharded", "ddp", "hogwild")
MPI_STRATEGIES = ("sharded", "ddp")  # ranks that message each other: mpiexec's or mpirun's
TIMEOUT = 3600.0  # seconds for a whole run of hogwild's processes or of an MPI job
# a GPU runs glove.c's loop as a kernel and mini-batches; the strict guard, mini-batches
DEVICE_STRATEGIES = {"cuda": ("records", "single"), "strict": ("single",)}
SYNTHETIC_QUERIES = ("paris", "king", "cats", "walked", "bigger")
TEXT8_QUERIES = ("france", "king", "computer", "three", "walking")


def train_vectors(counts: Cooccurrence, strategy: str = "single", ranks: int = 2,
                  dim: int = 50, x_max: float = 10.0, epochs: int = 10,
                  batch_size: int = 256, seed: int = 0, progress: bool = True,
                  threads: int | None = None, comm: Communicator | None = None
                  ) -> tuple[glove.GloVe | None, list[float], float]:
    """Train GloVe on ``counts``; returns the model, glove.c's cost per epoch, seconds.

    Prints the cost of each epoch; ``progress`` shows a progress bar too.
    The model and records are made on the current device (``md.set_device``);
    only ``records`` and ``single`` train on a device, the others on the CPU only.
    sharded and ddp start ``ranks`` processes under mpiexec; given ``comm`` (under
    mpirun: the world), every rank of it calls this instead and trains, rank 0 alone
    printing and getting the model (None elsewhere).
    """
    leader = comm is None or comm.rank == 0
    records = glove.Records.from_counts(counts.row, counts.col, counts.val, x_max=x_max,
                                        vocab_size=len(counts.words))
    model = glove.GloVe.create(len(counts.words), dim, seed)
    bar = tqdm(total=epochs * len(records), unit="rec", unit_scale=True,
               disable=not progress or not leader)

    def report(epoch: int, cost: float) -> None:
        bar.update(len(records) if strategy != "single" else 0)
        if leader:
            tqdm.write(f"epoch {epoch + 1:3d}  cost {cost:.5f}")

    start = time.perf_counter()
    if strategy == "records":  # glove.c: the records shuffled once, then in that order
        order = np.random.default_rng(seed).permutation(counts.nnz)
        shuffled = glove.to_records(counts.row[order], counts.col[order], counts.val[order])
        costs = glove.train_records(model, shuffled, epochs, threads, x_max=x_max,
                                    on_epoch=report).costs
    elif strategy == "single":
        costs = glove.train(model, records, epochs, batch_size, seed=seed,
                            on_batch=bar.update, on_epoch=report)
    elif strategy == "hogwild":
        costs = glove.train_hogwild(model, records, workers=ranks, epochs=epochs,
                                    batch_size=batch_size, seed=seed, timeout=TIMEOUT,
                                    on_epoch=report).costs
    elif strategy in MPI_STRATEGIES:
        trainers = {"sharded": glove.train_glove_sharded, "ddp": glove.train_glove_ddp}
        if comm is not None:  # these ranks are the job: every one trains
            model, costs = trainers[strategy](comm, model, records, epochs, batch_size, seed)
        else:  # a job of our own; its rank 0 returns the whole model
            model, costs = launch(trainers[strategy], world_size=ranks, backend="mpi",
                                  timeout=TIMEOUT,
                                  args=(model, records, epochs, batch_size, seed))[0]
        for epoch, cost in enumerate(costs):
            report(epoch, cost)
    else:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    bar.close()
    return model, costs, time.perf_counter() - start


def evaluate(vectors: np.ndarray, words: list[str], analogies: Any, similarity: Any,
             queries: tuple[str, ...]) -> dict[str, Any]:
    """Print nearest neighbours, analogy accuracy and similarity; return the reports.
    ``analogies``, ``similarity``: files, or what was read from them (None: no test)."""
    for query in (q for q in queries if q in set(words)):
        neighbours = ", ".join(w for w, _ in glove.nearest_neighbours(vectors, words, query, k=6))
        print(f"  {query:>10}: {neighbours}")
    result: dict[str, Any] = {}
    if analogies is not None:
        result["analogies"] = glove.analogy_accuracy(vectors, words, analogies)
        print(result["analogies"])
        print(f"analogy accuracy {result['analogies'].accuracy:.1%} "
              f"(coverage {result['analogies'].coverage:.0%})")
    if similarity is not None:
        result["similarity"] = glove.similarity_spearman(vectors, words, similarity)
        print(result["similarity"])
    return result


def choose_strategy(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Compute on ``--device`` (``options.choose_device``), with a strategy it allows
    (``DEVICE_STRATEGIES``, the first by default)."""
    device = choose_device(parser, args.device)
    allowed = DEVICE_STRATEGIES.get(device, STRATEGIES)
    if args.strategy is None:
        args.strategy = allowed[0]
    if args.strategy not in allowed:
        parser.error(f"--strategy {args.strategy} runs on the CPU only; on --device "
                     f"{device} use --strategy {' or '.join(allowed)}")


def read_evaluation_files(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Read ``--eval-analogies`` and ``--eval-similarity`` into ``args`` now: a bad line
    is a usage error naming the file and line before training, not after it."""
    for name, read in (("analogies", read_analogies), ("similarity", read_similarities)):
        path = getattr(args, f"eval_{name}")
        try:
            setattr(args, f"eval_{name}", read(path) if path else None)
        except (OSError, ValueError) as err:  # a folder; file:line and what is wrong there
            parser.error(f"argument --eval-{name}: {err}")


def check_ranks(c: Communicator, args: argparse.Namespace) -> int:
    """The run's ranks (``options.run_ranks``): ``--ranks`` (default 2) alone; under
    mpirun, its ranks for sharded and ddp, and just one for the other strategies."""
    if isinstance(c, LocalCommunicator) or args.strategy in MPI_STRATEGIES:
        return options.run_ranks(c, args.ranks, default=2)
    if c.size > 1:
        raise ValueError(f"--strategy {args.strategy} trains in one process, and mpirun "
                         f"started {c.size}: use --strategy {' or '.join(MPI_STRATEGIES)}, "
                         "or run it without mpirun")
    return 2 if args.ranks is None else args.ranks  # hogwild's processes


def parse_args(argv: list[str] | None = None
               ) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=path_or("synthetic", "text8"), default=None,
                        help="a text file or folder, or 'text8' (default: synthetic)")
    parser.add_argument("--min-count", type=integer(1), default=5)
    parser.add_argument("--window", type=integer(1), default=10)
    parser.add_argument("--dim", type=integer(1), default=50)
    parser.add_argument("--x-max", type=number(above=0), default=None,
                        help="f's cap (default: 10 on the synthetic corpus, 100 otherwise)")
    parser.add_argument("--epochs", type=integer(1), default=10)
    parser.add_argument("--batch-size", type=integer(1), default=256,
                        help="records per step of the mini-batch strategies")
    parser.add_argument("--seed", type=integer(0), default=0)
    parser.add_argument("--strategy", choices=STRATEGIES, default=None,
                        help="default: records (on the strict device: single)")
    parser.add_argument("--threads", type=integer(1), default=None,
                        help="workers of 'records': threads (default 1), or on a GPU warps "
                             "(default: 1/8 / sum of p_i^2, p_i the share of the records "
                             "naming word i: cuda_records.default_warps); the others ignore it")
    parser.add_argument("--ranks", type=integer(1), default=None,
                        help="processes of hogwild, sharded and ddp (default 2; under "
                             "mpirun: its ranks, and --ranks must agree); records and "
                             "single ignore it")
    parser.add_argument("--save", type=output_file, metavar="VECTORS.txt",
                        help="write w + w~ in GloVe text format")
    parser.add_argument("--eval-analogies", type=path_or(), metavar="FILE",
                        help="a Google-format analogy file")
    parser.add_argument("--eval-similarity", type=path_or(), metavar="FILE",
                        help="'word1 word2 score' lines")
    parser.add_argument("--no-progress", action="store_true")
    add_device_option(parser)
    args = parser.parse_args(argv)
    choose_strategy(parser, args)
    read_evaluation_files(parser, args)
    return parser, args


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    """Run the command line; returns rank 0's result (None on mpirun's other ranks)."""
    parser, args = parse_args(argv)
    c = world()
    with options.options_checked("glove", c):
        ranks = check_ranks(c, args)
    leader = c.rank == 0  # under mpirun every rank counts and trains; rank 0 alone speaks
    for option, users in (("threads", ("records",)), ("ranks", ("hogwild", *MPI_STRATEGIES))):
        if leader and getattr(args, option) is not None and args.strategy not in users:
            print(f"note: --{option} is for --strategy {' or '.join(users)}; "
                  f"{args.strategy} ignores it")
    with tempfile.TemporaryDirectory(prefix="minidist-glove-") as folder:
        counts, analogies, similarity = count_corpus(parser, args, folder, say=leader)
        synthetic = args.corpus in (None, "synthetic")
        x_max = args.x_max if args.x_max is not None else (10.0 if synthetic else glove.X_MAX)
        model, costs, seconds = train_vectors(
            counts, args.strategy, ranks, args.dim, x_max, args.epochs, args.batch_size,
            args.seed, progress=not args.no_progress, threads=args.threads,
            comm=None if isinstance(c, LocalCommunicator) else c)
        if not leader:
            return None
        on = (f" on {ranks} processes" if args.strategy == "hogwild" else
              f" on {ranks} ranks" if args.strategy in MPI_STRATEGIES else "")
        print(f"{args.epochs} epochs in {seconds:.1f} s "
              f"({args.epochs * counts.nnz / seconds / 1e6:.2f} M records/s), "
              f"strategy {args.strategy}{on}")
        words = [str(w) for w in counts.words]
        vectors = backend.to_numpy(model.vectors())  # the trained vectors, to the host once
        if args.save:
            glove.save_vectors(args.save, words, vectors)
            print(f"vectors written to {args.save}")
        queries = SYNTHETIC_QUERIES if synthetic else TEXT8_QUERIES
        analogies = args.eval_analogies if args.eval_analogies is not None else analogies
        similarity = args.eval_similarity if args.eval_similarity is not None else similarity
        result = evaluate(vectors, words, analogies, similarity, queries)
    return {"model": model, "costs": costs, "seconds": seconds, "words": words, **result}


if __name__ == "__main__":
    main()
