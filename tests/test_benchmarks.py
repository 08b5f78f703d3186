"""Every benchmark runs end to end on a tiny problem and prints its table (no timing asserted:
speed targets live in the benchmarks' own output, measured against a peer in the same run)."""

import os
import subprocess
import sys

import pytest

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
       "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}


def run(module: str, *args: str, env: dict | None = None) -> str:
    done = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          timeout=240, env=env or ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.timeout(250)
def test_autograd_benchmark_prints_both_libraries_or_minidist_alone():
    out = run("minidist.bench.autograd", "--sizes", "32,16,4", "--batch", "8", "--steps", "3",
              "--warmup", "1")
    assert "minidist" in out and "us/op" in out and "on cpu" in out
    torch_present = any(line.startswith("torch ") for line in out.splitlines())
    assert torch_present == ("target: step <= 1.25x PyTorch's on cpu:" in out)
    assert torch_present != ("minidist's figures alone" in out)


@pytest.mark.timeout(60)
def test_autograd_benchmark_smoke_runs_on_the_strict_device():
    out = run("minidist.bench.autograd", "--device", "strict", "--steps", "2", "--warmup", "1")
    assert "MLP 64-32-10, batch 16, float32, on strict" in out
    assert "a smoke test of the device path" in out and "its times mean nothing" in out
    assert "minidist " in out and "us/op" in out and "target" not in out


@pytest.mark.timeout(60)
def test_autograd_benchmark_without_a_gpu_says_so():
    from minidist import backend

    if backend.gpu_available():
        pytest.skip("a GPU is here: --device cuda runs")
    done = subprocess.run([sys.executable, "-m", "minidist.bench.autograd", "--device", "cuda"],
                          capture_output=True, text=True, timeout=50, env=ENV)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--device cuda: device 'cuda' was requested but" in done.stderr


@pytest.mark.mpi
@pytest.mark.timeout(250)
def test_allreduce_benchmark_launches_itself_and_writes_csv_and_plot(tmp_path):
    csv, png = tmp_path / "allreduce.csv", tmp_path / "allreduce.png"
    out = run("minidist.bench.allreduce", "-n", "2", "--sizes", "8,4K", "--iters", "3",
              "--warmup", "1", "--csv", str(csv), "--plot", str(png))
    for algorithm in ("naive", "ps", "ring", "tree", "double_tree", "recursive_doubling"):
        assert algorithm in out
    assert "busbw" in out and "target" in out
    assert csv.read_text().count("\n") >= 2 * 7 and png.stat().st_size > 0


@pytest.mark.mpi
@pytest.mark.timeout(250)
def test_fit_measures_and_saves_a_network_model(tmp_path):
    path = tmp_path / "network.json"
    out = run("minidist.bench.fit", "--out", str(path))
    from minidist.bench.fit import CURVE_FROM, SIZES
    from minidist.comm.cost.network import load_network_model

    # what was measured is anything on a busy machine (beta, a fitted slope, may even come out
    # negative): the test checks what was saved, not how fast the machine is
    model = load_network_model(path)
    assert f"alpha = {model.alpha:.3e} s" in out and f"beta  = {model.beta:.3e} s/B" in out
    assert model.alpha > 0 and model.gamma > 0  # a median of durations; bytes over a duration
    assert [n for n, _, _ in model.curve] == [n for n in SIZES if n >= CURVE_FROM]


@pytest.mark.mpi
@pytest.mark.timeout(250)
def test_ddp_benchmark_reports_buckets_scaling_and_a_straggler():
    out = run("minidist.bench.ddp", "--ranks", "2", "--steps", "2", "--warmup", "1",
              "--rounds", "1", "--depth", "4", "--width", "16", "--small-batch", "8",
              "--sizes", "32,16,4", "--batch", "16")
    assert "one bucket" in out and "efficiency" in out and "straggler" in out
    assert "target: bucketed step" in out and "target: efficiency at P = 2" in out


FAKE_GLOVE_C = """#!/bin/sh
# prints what glove.c prints while it trains (the benchmark reads its stderr), nothing more
echo "alpha: 0.750000" >&2
echo "11/22/26 - 10:00.00PM, iter: 001, cost: 0.142799" >&2
"""


@pytest.mark.timeout(250)
def test_glove_benchmark_reports_every_trainer_beside_the_reference_and_its_targets(tmp_path):
    fake = tmp_path / "glove"
    fake.write_text(FAKE_GLOVE_C)
    fake.chmod(0o755)
    out = run("minidist.bench.glove", "--dim", "8", "--epochs", "1", "--threads", "1", "2",
              "--reference-binary", str(fake))
    assert "glove.c" in out and "minidist record loop" in out and "batches of 256" in out
    assert all(f"target {n}:" in out for n in (1, 2, 3)) and "load average" in out
    assert "largest gap to glove.c" in out  # the fake's cost is the synthetic corpus's


@pytest.mark.mpi
@pytest.mark.timeout(250)
def test_ps_benchmark_launches_both_parts_and_prints_tables_and_targets():
    out = run("minidist.bench.ps", "--quick")
    assert "push+pull" in out and "ring allreduce of the whole" in out
    assert "ssp(3)" in out and "asp" in out
    assert all(f"target {n}:" in out for n in range(1, 6))


@pytest.mark.timeout(250)
def test_checkpointing_benchmark_prints_three_rows_and_sqrt_l_keeps_least(capsys):
    from minidist.bench.checkpointing import main

    rows = main(["--layers", "9", "--width", "32", "--batch", "8", "--steps", "2",
                 "--warmup", "1"])
    out = capsys.readouterr().out
    assert [row["segments"] for row in rows] == [None, 9, 3]
    assert all(row["label"] in out for row in rows) and "peak saved" in out
    none, every, root = (row["peak"] for row in rows)
    assert none > every > root  # bytes are counted, not timed: the same on every machine
    assert "target 1:" in out and out.split("target 1:")[1].split("\n")[0].endswith(": met")
    assert "target 2:" in out  # a time: printed, never asserted


@pytest.mark.mpi
@pytest.mark.timeout(250)
def test_pipeline_benchmark_reports_throughput_bubbles_and_memory():
    out = run("minidist.bench.pipeline", "--quick")
    for row in ("one process, whole model", "naive model parallelism (M = 1)",
                "naive schedule, 8 micro-batches", "GPipe", "1F1B", "1F1B, re-materialised"):
        assert row in out
    assert all(f"target {n}:" in out for n in range(1, 7))
    # the modelled clock and the byte counts do not depend on the machine's speed
    for n in (3, 5, 6):
        assert next(line for line in out.splitlines()
                    if line.startswith(f"target {n}:")).endswith(": met")


def test_english_corpus_strips_wikipedia_markup_and_writes_a_document_per_line(tmp_path):
    import bz2
    import zipfile

    from minidist.bench import english_corpus

    xml = ("<page><text xml:space=\"preserve\">'''Anarchism''' is a [[political philosophy|"
           "philosophy]] {{citation needed}} that rejects rulers&lt;ref&gt;a source&lt;/ref&gt;"
           " of every kind\n\nSecond paragraph of the same article here</text></page>")
    wheel = tmp_path / "gensim.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(english_corpus.WIKI, bz2.compress(xml.encode()))
        archive.writestr(english_corpus.TEST_DATA + "lee_background.cor", "One two three four\n")
        archive.writestr(english_corpus.TEST_DATA + "head500.noblanks.cor", "a b\nx y z w v\n")
    out = tmp_path / "english.txt"
    with open(out, "w", encoding="utf-8") as handle:
        english_corpus.write_lines(english_corpus.gensim_texts(str(wheel)), handle)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines == ["anarchism is a philosophy that rejects rulers of every kind",
                     "second paragraph of the same article here", "one two three four",
                     "x y z w v"]


@pytest.mark.timeout(120)
def test_placement_benchmark_launches_itself_and_prints_a_row_per_size_and_offset():
    out = run("minidist.bench.placement", "--sizes", "16K,64K", "--offsets", "0,16,2048",
              "--iters", "5")
    rows = [line.split() for line in out.splitlines() if line.split()[1:2] == ["KiB"]]
    assert [(r[0] + r[1], r[2]) for r in rows] == [(f"{s}KiB", o) for s in (16, 64)
                                                   for o in ("0", "16", "2048")]
    assert all(r[5] == "1.00" and r[7] == "1.00" for r in rows if r[2] == "0")  # the reference
    assert out.count("slowest copy against offset 0: ") == 1
    assert out.count("slowest exchange against offset 0: ") == 1


@pytest.mark.timeout(250)
def test_simulator_benchmark_prints_wall_time_and_the_model_check_per_algorithm():
    out = run("minidist.bench.simulator", "--ranks", "4,16", "--values", "100")
    for algorithm in ("naive", "ps", "ring", "tree", "double_tree", "recursive_doubling"):
        assert f"16 {algorithm:>18}" in out
    assert out.count("exact") == 12 and "DIFFERS" not in out
    assert out.count("ring floor") == 2 and "x the floor" in out  # the ring's peer, per P


def test_a_simulator_row_counts_for_its_target_only_when_it_is_the_targets_and_right(
        monkeypatch):
    """A wrong result (every value but the first) was "exact" and "met"; so was a run of
    one value a rank, not the target's 64 Ki."""
    from minidist.bench import simulator

    assert simulator.verdict("tree", 1024, 1, {"exact": True, "wall": 0.2}) == \
        "(the target is for 65536 values)"
    assert simulator.verdict("tree", 1024, 65536, {"exact": False, "wall": 0.2}) == \
        "target <= 10 s: missed (a wrong result or count)"
    assert simulator.verdict("tree", 1024, 65536, {"exact": True, "wall": 0.2}) == \
        "target <= 10 s: met"

    right = simulator.allreduce

    def wrong_after_the_first(x, c, algorithm="ring", out=None):
        right(x, c, algorithm=algorithm, out=out)
        out[1:] = -1.0
        return out

    monkeypatch.setattr(simulator, "allreduce", wrong_after_the_first)
    assert not simulator.run_once("ring", 4, 8)["exact"]


@pytest.mark.timeout(250)
def test_scaling_sweep_prints_every_p_checks_the_simulator_and_plots(tmp_path):
    png = tmp_path / "scaling.png"
    out = run("minidist.bench.scaling", "--sizes", "8,64Ki", "--max-ranks", "64",
              "--simulate-up-to", "8", "--plot", str(png))
    assert out.count("\n    64  ") == 2 and "DIFFERS" not in out
    assert out.count("  =\n") == 2 * 3  # P = 2, 4, 8 simulated at both sizes
    assert png.stat().st_size > 0
    bad = subprocess.run([sys.executable, "-m", "minidist.bench.scaling", "--sizes", "7"],
                         capture_output=True, text=True, timeout=60, env=ENV)
    assert bad.returncode == 2 and "multiple of 8" in bad.stderr


@pytest.mark.parametrize("bench, options, message", [
    ("allreduce", ["--iters", "0"], "argument --iters: wants an integer >= 1, got '0'"),
    ("allreduce", ["--sizes", "abc"], "argument --sizes: wants a positive size in bytes"),
    ("allreduce", ["--dtype", "float16"], "argument --dtype: invalid choice: 'float16'"),
    ("allreduce", ["--algorithms", "ring,bogus"], "argument --algorithms: 'bogus' is not one"),
    ("allreduce", ["-n", "1"], "argument -n/--ranks: wants an integer >= 2, got '1'"),
    ("checkpointing", ["--batch", "0"], "argument --batch: wants an integer >= 1, got '0'"),
    ("autograd", ["--steps", "0"], "argument --steps: wants an integer >= 1, got '0'"),
    ("placement", ["--iters", "0"], "argument --iters: wants an integer >= 1, got '0'"),
    ("zero", ["--sizes", "5,x"], "argument --sizes: wants an integer >= 1, got 'x'"),
    ("fit", ["--max-size", "abc"], "argument --max-size: wants a positive size in bytes"),
    ("moe", ["--ranks", "3"], "--experts 8 must be a multiple of every P in --ranks 3"),
    ("moe", ["--capacity-factor", "0"], "argument --capacity-factor: wants a finite number > 0"),
    ("pipeline", ["--quick", "--micro-batches", "0"], "argument --micro-batches: wants an"),
    ("pipeline", ["--depth", "2"], "argument --depth: wants an integer >= 3, got '2'"),
    ("simulator", ["--algorithms", "nope"], "argument --algorithms: 'nope' is not one of"),
    ("ps", ["--slowdown", "nan"], "argument --slowdown: wants a finite number >= 1"),
])
def test_a_bad_option_is_a_usage_error_before_anything_runs(bench, options, message, capsys):
    """Each once went on to a traceback (an empty median, a division by zero, an MPI job
    started with a dtype it then refused)."""
    import importlib

    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(f"minidist.bench.{bench}").main(options)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("bench, options, given", [
    ("pipeline", ["--width", "64", "--batch", "128", "--steps", "3"],
     dict(width=64, batch=128, steps=3, rounds=1)),
    ("model_parallel", ["--widths", "48", "--tokens", "256"],
     dict(widths=[48], tokens=256, steps=2)),
    ("ps", ["--iters", "9", "--target", "0.5"], dict(iters=9, target=0.5, rows=100)),
])
def test_quick_keeps_the_options_given_with_it(bench, options, given):
    """--quick once overwrote them without a word (a width of 64 ran at 32)."""
    import importlib

    args = importlib.import_module(f"minidist.bench.{bench}").parse_args(["--quick", *options])
    assert {name: getattr(args, name) for name in given} == given


def test_a_saved_fit_asked_for_and_missing_is_a_usage_error(tmp_path, monkeypatch, capsys):
    """It once priced with the built-in defaults and headed them "the saved fit"."""
    from minidist.bench import allreduce

    monkeypatch.setenv("MINIDIST_NETWORK", str(tmp_path / "none.json"))
    with pytest.raises(SystemExit) as exit_:
        allreduce.main(["--sizes", "64K", "--fit", "saved"])
    assert exit_.value.code == 2 and "--fit saved: no fit saved at" in capsys.readouterr().err


def test_glove_and_cooccur_name_a_missing_corpus(tmp_path, capsys):
    from minidist.data import cooccur
    from minidist.examples import glove

    for main, argv in ((glove.main, ["--corpus", str(tmp_path / "nope.txt")]),
                       (cooccur.main, [str(tmp_path / "nope.txt"), str(tmp_path / "out.npz")])):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2 and "no file or folder at" in capsys.readouterr().err


@pytest.mark.parametrize("text, options", [("", []), ("a b a b\n", ["--min-count", "3"])])
def test_glove_benchmark_with_no_word_to_train_is_a_usage_error(tmp_path, capsys, text,
                                                                options):
    """An empty corpus or a --min-count no word reaches once ended in a traceback."""
    from minidist.bench import glove

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        glove.main(["--corpus", str(corpus), "--epochs", "1", "--threads", "1", *options])
    assert exit_.value.code == 2
    count = options[1] if options else "5"
    assert f"--min-count {count}: no word of the corpus occurs that often" in \
        capsys.readouterr().err


def test_english_corpus_checks_the_wheel_and_never_leaves_a_partial_file(tmp_path, capsys,
                                                                         monkeypatch):
    """A missing or broken wheel once gave a traceback and left a 0-byte OUT."""
    import zipfile

    from minidist.bench import english_corpus

    out, not_zip, empty_zip = tmp_path / "english.txt", tmp_path / "x.whl", tmp_path / "e.whl"
    not_zip.write_bytes(b"not a zip")
    with zipfile.ZipFile(empty_zip, "w") as archive:
        archive.writestr("gensim/__init__.py", "")
    for wheel, message in ((tmp_path / "none.whl", "no file there"),
                           (not_zip, "not a zip file"),
                           (empty_zip, f"holds no {english_corpus.WIKI}")):
        with pytest.raises(SystemExit) as exit_:
            english_corpus.main([str(out), "--gensim-wheel", str(wheel)])
        assert exit_.value.code == 2 and message in capsys.readouterr().err
        assert list(tmp_path.glob("english*")) == []

    def broken(texts, handle):
        handle.write("half a line")
        raise OSError("disk full")

    monkeypatch.setattr(english_corpus, "write_lines", broken)
    with pytest.raises(OSError, match="disk full"):
        english_corpus.main([str(out)])
    assert list(tmp_path.glob("english*")) == []
