"""The ps_mlp example's command line on in-process ranks (modelled clock): what it runs,
prints and draws, and its clear errors. Its MPI side is in test_ps_mpi.py."""

import pytest

from minidist.examples import ps_mlp

QUICK = ["--steps", "20", "--eval-every", "5", "--ranks", "4"]


@pytest.mark.timeout(60)
def test_a_run_prints_its_summary_draws_its_plot_and_repeats_to_the_bit(tmp_path, capsys):
    plot = tmp_path / "loss.png"
    args = [*QUICK, "--consistency", "ssp", "--staleness", "2", "--straggler", "3:2"]
    first = ps_mlp.main([*args, "--plot", str(plot)])
    out = capsys.readouterr().out
    assert "ssp(2), 1 server(s) + 3 worker(s), 20 clocks: test accuracy" in out
    assert "modelled s" in out and plot.stat().st_size > 0
    assert first["accuracy"] > 0.5  # 20 clocks of 3 workers; chance is 10%
    reads = first["run"].staleness.reads
    assert max(reads) <= 2 and sum(reads.values()) == 3 * 20 + 1
    again = ps_mlp.main(args)
    assert (again["loss"], again["seconds"], again["time_to_target"]) == \
        (first["loss"], first["seconds"], first["time_to_target"])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("consistency", [["ssp", "--staleness", "1"], ["asp"], ["bsp"]])
def test_a_run_stopped_and_started_again_resumes_and_ends_as_one_never_stopped(
        tmp_path, capsys, consistency):
    """It had no way to: train_mlp took checkpoint= and never stopped at one."""
    options = ["--ranks", "4", "--checkpoint-every", "5", "--consistency", *consistency]
    whole = ps_mlp.main([*options, "--steps", "20", "--checkpoint-dir", str(tmp_path / "a")])
    ps_mlp.main([*options, "--steps", "10", "--checkpoint-dir", str(tmp_path / "b")])
    capsys.readouterr()
    resumed = ps_mlp.main([*options, "--steps", "20", "--checkpoint-dir", str(tmp_path / "b")])
    assert f"resuming from the checkpoint in {tmp_path / 'b'}" in capsys.readouterr().out
    assert (resumed["run"].values == whole["run"].values).all()
    assert resumed["run"].requests["PUSH"] == 3 * 2  # only clocks 10-19: one checkpoint


@pytest.mark.timeout(60)
@pytest.mark.parametrize("change, said", [
    (["--servers", "2"], "was saved by 1 server(s), and this run has 2: resume with as many"),
    (["--optimizer", "adam"], "holds the state of the servers' sgd optimiser, and this run's "
                              "is adam: resume with it"),
])
def test_resuming_with_another_server_count_or_optimiser_says_so_on_every_rank(
        tmp_path, capsys, change, said):
    """Another server count ended in a traceback of the servers naming key ranges
    ((np.int64(0), np.int64(76)) against (0, 38)); another optimiser in a KeyError
    (sgd to adam), or its state dropped without a word (adam to sgd)."""
    options = ["--ranks", "4", "--steps", "10", "--checkpoint-dir", str(tmp_path)]
    ps_mlp.main([*options, "--checkpoint-every", "5"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as ended:
        ps_mlp.main([*options, *change])
    told = capsys.readouterr().err
    assert ended.value.code == 2 and "Traceback" not in told
    assert told.startswith("ps_mlp (rank 0): the checkpoint in") and said in told


@pytest.mark.timeout(60)
@pytest.mark.parametrize("first, then, said", [
    (20, 10, "20 clocks (resumed past --steps 10): test accuracy"),
    (10, 20, "20 clocks (resumed at clock 10: times and counts are of the clocks since): "
             "test accuracy"),
])
def test_a_resumed_run_says_what_its_figures_cover(tmp_path, capsys, first, then, said):
    """Past its steps it printed "10 clocks" for the 20-clock model it scored; resumed at
    10, its 20 clocks stood beside the time and pushes of the last 10 alone."""
    options = ["--ranks", "4", "--checkpoint-dir", str(tmp_path), "--checkpoint-every", "5"]
    ps_mlp.main([*options, "--steps", str(first)])
    capsys.readouterr()
    assert ps_mlp.main([*options, "--steps", str(then)])["clocks"] == 20
    assert said in capsys.readouterr().out


@pytest.mark.timeout(60)
def test_a_straggler_doubles_bsps_modelled_time_and_asp_does_not_wait_for_it():
    plain = ps_mlp.main([*QUICK, "--consistency", "bsp"])
    bsp = ps_mlp.main([*QUICK, "--consistency", "bsp", "--straggler", "3:2"])
    asp = ps_mlp.main([*QUICK, "--consistency", "asp", "--straggler", "3:2"])
    assert bsp["seconds"] > 1.5 * plain["seconds"]  # every clock waits for the straggler
    assert set(bsp["run"].staleness.reads) == {0}
    assert max(asp["run"].staleness.reads) > 2  # the fast workers ran ahead


@pytest.mark.timeout(60)
@pytest.mark.parametrize("options", [
    ["--optimizer", "adam", "--servers", "2"],
    ["--optimizer", "adagrad", "--lr", "0.05", "--consistency", "asp"],
    ["--softsync", "1", "--staleness-aware", "--consistency", "bsp"],
])
def test_optimizers_softsync_and_several_servers_train(options):
    assert ps_mlp.main([*QUICK, "--steps", "30", *options])["accuracy"] > 0.5


@pytest.mark.parametrize("options, message", [
    (["--servers", "4"], "--servers 4 on 4 ranks: need 1 <= servers < ranks"),
    (["--softsync", "4"], "--softsync 4: n must be in 1..3"),
    (["--straggler", "0:2"], "--straggler rank 0: the workers are ranks 1..3"),
    (["--consistency", "ssp", "--staleness", "-1"],
     "argument --staleness: wants an integer >= 0, got '-1'"),
    (["--lr", "-1"], "argument --lr: wants a finite number > 0, got '-1'"),
    (["--steps", "0"], "argument --steps: wants an integer >= 1, got '0'"),
    (["--consistency", "bsp", "--staleness", "2"],  # once ignored without a word
     "--staleness 2: only SSP has a staleness bound (--consistency ssp), not bsp"),
    (["--optimizer", "adam", "--staleness-aware"], "--staleness-aware scales SGD's steps"),
])
def test_bad_input_is_a_clear_error_and_exit_status_2(options, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        ps_mlp.main([*QUICK, *options])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("text", ["3", "3:0.5", "x:2", "3:fast"])
def test_a_malformed_straggler_is_refused_by_the_parser(text, capsys):
    with pytest.raises(SystemExit):
        ps_mlp.main([*QUICK, "--straggler", text])
    assert "argument --straggler: wants RANK:FACTOR" in capsys.readouterr().err
