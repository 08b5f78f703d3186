"""How fast does GloVe train, in how much memory? Beside the reference C, in the same run.

    python -m minidist.bench.glove                                   # synthetic corpus, offline
    python -m minidist.bench.glove --corpus text.txt --reference-binary GloVe/build/glove
    python -m minidist.bench.glove --device cuda                     # the GPU against a core

1. The corpus (``--corpus PATH``, any text file or folder; the synthetic
   language by default) is counted (``--min-count``, ``--window``) and
   written once as glove.c's shuffled record file, with its vocabulary.
2. Each trainer trains ``--epochs`` epochs from the same start, on those
   records, in a fresh process of its own (so its peak memory is its own):
   glove.c's loop (``glove.train_records``, the file streamed) on each of
   ``--threads``, and the mini-batch trainer (``glove.train``, batches of
   ``--batch-size``, the records in memory).
3. The reference binary, when given, runs on the same file from the same
   start (``-load-init-param``) with each of ``--threads``.
4. With ``--device cuda``, glove.c's loop runs on the GPU as a kernel
   (``glove/cuda_records.py``; its default number of warps, or each of
   ``--warps``), and the mini-batch trainer too (batches of
   ``--device-batch-size``: a GPU wants thousands of records a step), from
   the same start; d defaults to 100 then. ``--device strict`` runs the CI
   guard's stand-in instead (mini-batches): on the CPU, a check that the
   run works, its speed meaningless.

Printed per trainer: seconds per epoch (the median), M records per second
and per thread, the ratio to C at the same number of threads, peak resident
memory and how much of it training added, and the cost of every epoch.
Then the targets: the record loop >= 1.0x C's records/s on one thread,
>= 1.7x its own one-thread speed on two, memory within twice the records'
16 bytes plus the model; with a device, its records/s >= 10x one CPU core's
(the faster of the record loop and the mini-batch trainer on one thread) at
d = 100. Wall-clock figures move with the machine's load: the load average
is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from minidist import backend, glove
from minidist.bench.glove_report import MB, device_target, report, targets
from minidist.examples.options import choose_device
from minidist.util.arguments import integer, number, path_or


def peak_mb(pid: int | str = "self") -> float:
    """A process's peak resident memory in MB: Linux's VmHWM, which starts afresh at exec
    (getrusage's ru_maxrss keeps the peak of the parent the child was forked from)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            kb = next((int(line.split()[1]) for line in status if line.startswith("VmHWM")), 0)
        return kb / 1024  # 0 for a process that has already exited
    except OSError:  # no /proc (macOS: bytes; this process only)
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / MB


def prepare(corpus: str | None, folder: Path, min_count: int, window: int) -> dict[str, Any]:
    """Count the corpus; write glove.c's record file (shuffled once) and vocabulary file.

    A corpus that is not UTF-8, or in which no word occurs ``min_count`` times, is a
    ValueError saying so (``main`` makes it a usage error)."""
    from minidist.data.cooccur import count_cooccurrences
    from minidist.data.vocab import build_vocab

    if corpus is None:
        from minidist.data.synthetic_language import generate_corpus

        source: Any = generate_corpus(seed=0).lines
    else:
        source = corpus
    vocab = build_vocab(source, min_count=min_count)
    if not len(vocab):  # nothing to train: say why now, not in a trainer
        raise ValueError(f"--min-count {min_count}: no word of the corpus occurs that often; "
                         "lower it, or check the corpus is not empty")
    counts = count_cooccurrences(source, vocab, window=window)
    glove.write_records(folder / "records.bin", counts.row, counts.col, counts.val, seed=0)
    with open(folder / "vocab.txt", "w", encoding="utf-8") as out:
        out.writelines(f"{w} {n}\n" for w, n in zip(vocab.words, vocab.counts, strict=True))
    tokens = int(vocab.counts.sum())
    return {"words": len(vocab), "records": counts.nnz, "tokens": tokens}


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One trainer in this (fresh) process: the spec's epochs, timed, memory measured."""
    backend.set_device("cpu")  # the start is made on the host; the device trainer moves it
    file, dim = glove.RecordFile(spec["folder"] + "/records.bin"), spec["dim"]
    glove.train_records(glove.GloVe.create(2, dim), glove.to_records([0], [1], [2.0]))  # load
    baseline = peak_mb()
    shape, size = (spec["words"], dim + 1), spec["words"] * (dim + 1)
    word, context = (np.fromfile(spec["folder"] + "/init.bin", count=size,
                                 offset=8 * size * k).reshape(shape) for k in (0, 1))
    model = glove.GloVe(word, context, np.ones_like(word), np.ones_like(context))
    if spec["trainer"] == "records":  # on a GPU: glove.c's loop as a kernel, the file read once
        backend.set_device(spec.get("device", "cpu"))
        run = glove.train_records(model.to(backend.xp()), file, spec["epochs"],
                                  spec["threads"], x_max=spec["x_max"])
        costs, seconds = run.costs, run.seconds
    else:
        backend.set_device(spec.get("device", "cpu"))
        model = model.to(backend.xp())  # the tables and their sums to the device, once
        in_memory = file.read()
        records = glove.Records.from_counts(in_memory["word1"] - 1, in_memory["word2"] - 1,
                                            in_memory["val"], x_max=spec["x_max"])
        del in_memory
        costs, seconds = [], []
        for epoch in range(spec["epochs"]):
            started = time.perf_counter()
            costs += glove.train(model, records, 1, spec["batch_size"], seed=epoch)
            backend.to_numpy(model.word[:1])  # a copy back waits for the device's queue
            seconds.append(time.perf_counter() - started)
    return {"costs": costs, "seconds": seconds, "peak": peak_mb(), "baseline": baseline}


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "minidist.bench.glove", "--child",
                           json.dumps(spec)], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{spec['trainer']} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def run_reference(binary: str, spec: dict[str, Any]) -> dict[str, Any]:
    """glove.c on the same file from the same start: costs as it prints them, each epoch's
    seconds from the arrival of its line, peak memory from the kernel's accounting."""
    folder = spec["folder"]
    command = [binary, "-input-file", f"{folder}/records.bin", "-vocab-file",
               f"{folder}/vocab.txt", "-save-file", f"{folder}/c_vectors", "-binary", "1",
               "-threads", str(spec["threads"]), "-iter", str(spec["epochs"]),
               "-vector-size", str(spec["dim"]), "-x-max", str(spec["x_max"]),
               "-load-init-param", "1", "-init-param-file", f"{folder}/init.bin",
               "-seed", "1", "-verbose", "2"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    costs, stamps, peak = [], [], 0.0
    for line in process.stderr:
        if line.startswith("alpha:") or "iter:" in line:
            stamps.append(time.perf_counter())
            peak = max(peak, peak_mb(process.pid))  # its peak so far; it ends after saving
        found = re.search(r"iter: \d+, cost: ([0-9.eE+-]+|nan|-nan)", line)
        if found:
            costs.append(float(found.group(1)))
    if process.wait() or len(costs) != spec["epochs"]:
        raise RuntimeError(f"the reference binary failed (status {process.returncode}): "
                           f"{' '.join(command)}")
    return {"costs": costs, "seconds": list(np.diff(stamps)), "peak": peak, "baseline": 0.0}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=path_or(),
                        help="a text file or folder (default: the synthetic one)")
    parser.add_argument("--reference-binary", metavar="PATH", help="glove.c's `glove` binary")
    parser.add_argument("--min-count", type=integer(1), default=5)
    parser.add_argument("--window", type=integer(1), default=10)
    parser.add_argument("--dim", type=integer(1), default=None,
                        help="default: 50, or 100 with --device (the GPU target's d)")
    parser.add_argument("--x-max", type=number(above=0), default=None,
                        help="f's cap (default: 10 on the synthetic corpus, 100 otherwise)")
    parser.add_argument("--epochs", type=integer(1), default=3)
    parser.add_argument("--threads", type=integer(1), nargs="+", default=[1, 2])
    parser.add_argument("--batch-size", type=integer(1), default=256,
                        help="of the mini-batch trainer")
    parser.add_argument("--no-minibatch", action="store_true")
    parser.add_argument("--device", choices=("cuda", "strict"),
                        help="also train mini-batches there (strict: the CI guard, on the CPU)")
    parser.add_argument("--device-batch-size", type=integer(1), default=4096,
                        help="records per step on the device")
    parser.add_argument("--warps", type=integer(1), nargs="+",
                        help="warps of the GPU's record kernel, a row each (default: its own)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return {}
    if args.reference_binary and not os.access(args.reference_binary, os.X_OK):
        parser.error(f"--reference-binary {args.reference_binary}: not an executable file")
    check_device(parser, args.device)
    if args.warps and args.device != "cuda":
        parser.error("--warps: the record kernel's warps, for --device cuda only")
    if args.dim is None:
        args.dim = 100 if args.device else 50
    x_max = args.x_max if args.x_max is not None else (10.0 if args.corpus is None else 100.0)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="minidist-bench-glove-") as folder:
        started = time.perf_counter()
        try:
            data = prepare(args.corpus, Path(folder), args.min_count, args.window)
        except ValueError as err:  # not UTF-8 (CorpusError), or no word left
            parser.error(str(err))
        n = data["records"]
        model = glove.GloVe.create(data["words"], args.dim, seed=0)
        np.concatenate((model.word, model.context)).tofile(f"{folder}/init.bin")
        glove.train_records(model.copy(), glove.to_records([0], [1], [2.0]))  # compile, cache
        print(f"{args.corpus or 'synthetic corpus'}: {data['tokens']:,} tokens, "
              f"{data['words']:,} words, {n:,} records ({16 * n / MB:.0f} MB), d = {args.dim}, "
              f"x_max = {x_max:g}, {args.epochs} epochs ({time.perf_counter() - started:.0f} s "
              f"to prepare); load average {load[0]:.2f} {load[1]:.2f}")
        print(f"\n{'trainer':<22} {'thr':>3} {'s/epoch':>8} {'M rec/s':>8} {'/thread':>8} "
              f"{'vs C':>7} {'peak MB':>8} {'added':>8}   cost per epoch")
        base = {"folder": folder, "words": data["words"], "dim": args.dim, "x_max": x_max,
                "epochs": args.epochs, "batch_size": args.batch_size}
        figures: dict[str, Any] = {"data": data}
        for threads in args.threads:
            reference = None
            if args.reference_binary:
                reference = run_reference(args.reference_binary, {**base, "threads": threads})
                reference["seconds_median"] = statistics.median(reference["seconds"])
                figures[f"c{threads}"] = reference
                figures[f"c{threads}_rate"] = report("glove.c", threads, reference, n, None)
            result = run_child({**base, "trainer": "records", "threads": threads})
            figures[f"records{threads}"] = result
            figures[f"records{threads}_rate"] = report("minidist record loop", threads, result,
                                                       n, reference)
        if not args.no_minibatch:
            result = run_child({**base, "trainer": "minibatch", "threads": 1})
            figures["minibatch"] = result
            c1 = figures.get("c1")
            figures["minibatch_rate"] = report(f"minidist batches of {args.batch_size}", 1,
                                               result, n, c1 if 1 in args.threads else None)
        if args.device:  # glove.c's loop runs on a GPU as a kernel; mini-batches anywhere
            rows = [("minibatch", None, f"{args.device}, batches of {args.device_batch_size}")]
            if args.device == "cuda":
                rows = [("records", warps, f"cuda kernel, {warps or 'default'} warps")
                        for warps in args.warps or [None]] + rows
            for trainer, warps, name in rows:
                result = run_child({**base, "trainer": trainer, "threads": warps,
                                    "device": args.device, "batch_size": args.device_batch_size})
                key = f"device_{name}"
                figures[key] = result
                figures[f"{key}_rate"] = report(name, 1, result, n, None)
        targets(figures, args.threads, n, data["words"], args.dim)
        if args.device:
            device_target(figures, args.device, args.dim)
    end = os.getloadavg()
    print(f"load average after: {end[0]:.2f} {end[1]:.2f}")
    return figures


def check_device(parser: argparse.ArgumentParser, device: str | None) -> None:
    """A clear error now, not in a child, when ``device`` cannot be had (no cupy, no GPU).
    This process stays on the CPU: it only prepares the data and the start."""
    if device:
        choose_device(parser, device)
        backend.set_device("cpu")


if __name__ == "__main__":
    main()
