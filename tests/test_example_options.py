"""The examples' command lines refuse a bad value at once, naming the option: the
argparse types of ``examples/options.py`` (a range, a finite number, a file that can be
written), and the checks that depend on the ranks, one line per rank under mpiexec."""

from __future__ import annotations

import argparse
import importlib

import pytest
from mpi_example import run_under_mpiexec

from minidist.examples.options import image_file, integer, number, output_file


def test_integer_takes_whole_numbers_from_its_least():
    assert integer(0)("0") == 0 and integer(1)("7") == 7
    for text in ("0", "-3", "2.5", "two", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="wants an integer >= 1"):
            integer(1)(text)


def test_number_takes_finite_numbers_within_its_bounds():
    assert number(above=0)("1e-3") == 1e-3 and number(least=0, most=1)("1") == 1.0
    for parse, text in ((number(above=0), "0"), (number(least=1), "0.5"),
                        (number(most=1), "1.5"), (number(), "nan"), (number(), "inf"),
                        (number(), "x")):
        with pytest.raises(argparse.ArgumentTypeError, match="wants a finite number"):
            parse(text)


def test_output_file_makes_its_folder_and_refuses_a_folder_or_an_unwritable_place(tmp_path):
    target = tmp_path / "new" / "deeper" / "plot.png"
    assert output_file(str(target)) == str(target) and target.parent.is_dir()
    with pytest.raises(argparse.ArgumentTypeError, match="is a folder"):
        output_file(str(tmp_path))
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(argparse.ArgumentTypeError, match="cannot make the folder"):
        output_file(str(blocker / "plot.png"))
    # a place no file can be made in, which os.access called writable for root: the run
    # trained, then failed on its plot
    with pytest.raises(argparse.ArgumentTypeError, match="cannot write into the folder"):
        output_file("/proc/plot.png")
    assert not list(target.parent.iterdir())  # the trial file is gone


def test_image_file_wants_a_suffix_matplotlib_saves(tmp_path):
    for name in ("plot.png", "plot.PDF", "deep/plot.svg"):
        assert image_file(str(tmp_path / name)) == str(tmp_path / name)
    for name in ("plot.txt", "plot", "plot.pgf"):  # .pgf wants TeX: a traceback at the end
        with pytest.raises(argparse.ArgumentTypeError, match="name the plot's file with one of"):
            image_file(str(tmp_path / name))


@pytest.mark.parametrize("module, options, message", [
    ("bench.scaling", ["--plot", "scaling.txt"], "argument --plot: 'scaling.txt': name the"),
    ("bench.allreduce", ["--plot", "busbw.csv"], "argument --plot: 'busbw.csv': name the"),
    ("examples.ps_staleness", ["--plot", "out"], "argument --plot: 'out': name the plot's"),
    ("examples.pipeline", ["--gantt", "g.html"], "argument --gantt: 'g.html': name the"),
    ("bench.fit", ["--out", "."], "argument --out: '.' is a folder; give a file's name"),
    ("bench.ddp", ["--timeline", "/proc/x/t.png"], "argument --timeline: cannot make the "
                                                   "folder of '/proc/x/t.png'"),
    ("examples.mlp_ddp", ["--checkpoint-dir", "/proc/x/ck"], "argument --checkpoint-dir: "
                                                             "cannot make '/proc/x/ck'"),
    ("examples.ps_mlp", ["--checkpoint-dir", "/dev/null"], "argument --checkpoint-dir: "
                                                           "'/dev/null' is a file, not a folder"),
    ("examples.ps_hotspots", ["--race", "--plot", "race.png"], "--plot draws the hot-spot "
                                                                 "load chart; --race prints"),
    ("bench.allreduce", ["--sizes", "6,64"], "--sizes 6: not a whole number of float32 values"),
    ("bench.allreduce", ["--max-size", "100", "--dtype", "float64"], "--sizes 100: not a whole"),
])
def test_an_output_the_run_could_not_write_is_refused_before_it(module, options, message,
                                                                 capsys):
    """Found after the whole sweep or fit before: a plot matplotlib cannot save, a fit
    saved over a folder, a checkpoint folder that cannot be made (at the first save)."""
    main = importlib.import_module(f"minidist.{module}").main
    with pytest.raises(SystemExit) as exit_:
        main(options)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("example, options, message", [
    ("pipeline", ["--batch-size", "0"], "argument --batch-size: wants an integer >= 1, got '0'"),
    ("parallel_3d", ["--pp", "0"], "argument --pp: wants an integer >= 1, got '0'"),
    ("ps_mlp", ["--batch-size", "0"], "argument --batch-size: wants an integer >= 1"),
    ("ps_mlp", ["--straggler", "3:nan"], "wants RANK:FACTOR with a finite FACTOR >= 1"),
    ("ps_mlp", ["--straggler", "3:inf"], "wants RANK:FACTOR with a finite FACTOR >= 1"),
    ("fedavg", ["--clients", "0"], "argument --clients: wants an integer >= 1, got '0'"),
    ("fedavg", ["--fraction", "0"], "argument --fraction: wants a finite number > 0 and <= 1"),
    ("allreduce_tour", ["--local", "0"], "argument --local: wants an integer >= 1, got '0'"),
    ("ps_hotspots", ["--workers", "0"], "argument --workers: wants an integer >= 1"),
    ("glove", ["--threads", "0"], "argument --threads: wants an integer >= 1"),
    ("mlp_ddp", ["--bucket-mb", "-1"], "argument --bucket-mb: wants a finite number >= 0"),
    ("mlp_ddp", ["--algorithm", "bogus"], "argument --algorithm: invalid choice: 'bogus'"),
    ("moe", ["--top-k", "0"], "argument --top-k: wants an integer >= 1, got '0'"),
    ("zero", ["--lr", "-1"], "argument --lr: wants a finite number > 0, got '-1'"),
    *[(example, ["--seed", "-1"], "argument --seed: wants an integer >= 0, got '-1'")
      for example in ("ps_staleness", "fedavg", "zero", "moe", "ps_mlp", "tensor_parallel",
                      "ps_hotspots", "pipeline", "glove", "parallel_3d")],
])
def test_a_bad_value_is_a_usage_error_naming_its_option(example, options, message, capsys):
    """(Nine examples' --seed -1 was numpy's traceback on every rank.)"""
    main = importlib.import_module(f"minidist.examples.{example}").main
    with pytest.raises(SystemExit) as exit_:
        main(options)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_glove_with_a_min_count_no_word_reaches_is_a_usage_error(tmp_path, capsys):
    from minidist.examples import glove

    corpus = tmp_path / "small.txt"
    corpus.write_text("the cat sat on the mat\nthe dog sat on the rug\n")
    with pytest.raises(SystemExit) as exit_:
        glove.main(["--corpus", str(corpus), "--min-count", "100", "--no-progress"])
    assert exit_.value.code == 2
    assert "--min-count 100: no word of the corpus occurs that often" in capsys.readouterr().err


def test_a_plot_into_a_missing_folder_is_made_before_the_run(tmp_path):
    from minidist.examples import ps_hotspots

    plot = tmp_path / "charts" / "load.png"
    ps_hotspots.main(["--servers", "2", "--workers", "2", "--steps", "2", "--plot", str(plot)])
    assert plot.stat().st_size > 0


@pytest.mark.mpi
@pytest.mark.timeout(150)
@pytest.mark.parametrize("example, options, message", [
    ("mlp_ddp", ["--epochs", "1"], "--global-batch 32 must be a multiple of the 3 ranks"),
    ("moe", ["--experts", "6", "--global-batch", "64"],
     "--global-batch 64 must be a multiple of the 3 ranks"),
    ("moe", ["--experts", "4", "--global-batch", "66"], "--experts 4 must be a multiple of the 3"),
    ("glove", ["--strategy", "ddp", "--ranks", "2"], "--ranks 2 under mpirun, which started 3"),
    ("glove", ["--strategy", "records"], "--strategy records trains in one process, and mpirun"),
])
def test_what_depends_on_the_ranks_is_one_line_on_every_rank(example, options, message):
    """And nothing more: the ranks finalize MPI before they exit 2 (mpi4py's -m turned the
    exit into an MPI_Abort, a line a rank, and MPICH's segment stayed in /dev/shm)."""
    job = run_under_mpiexec(3, f"minidist.examples.{example}", options)
    assert job.returncode == 2, job.stdout + job.stderr
    for rank in range(3):
        assert f"{example} (rank {rank}): {message}" in job.stderr, job.stderr
    assert "Traceback" not in job.stderr and "MPI_Abort" not in job.stderr, job.stderr


def test_glove_names_a_corpus_that_is_not_utf8(tmp_path, capsys):
    """It once ended in a bare UnicodeDecodeError naming neither the file nor the byte."""
    from minidist.examples import glove

    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes("the café\n".encode("latin-1"))
    with pytest.raises(SystemExit) as exit_:
        glove.main(["--corpus", str(corpus), "--min-count", "1", "--no-progress"])
    assert exit_.value.code == 2
    assert f"{corpus}: not UTF-8 text (invalid continuation byte at byte 7)" in \
        capsys.readouterr().err
