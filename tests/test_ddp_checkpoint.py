"""Checkpoints of data-parallel training (minidist.parallel.checkpoint), in process: what
a checkpoint restores, atomic writes, and a run resumed from the middle of an epoch that
ends equal to a run never stopped. Killed MPI jobs resumed: test_failures_mpi.py."""

from __future__ import annotations

import numpy as np
import pytest

import minidist as md
from minidist import comm
from minidist.examples import mlp_ddp
from minidist.parallel import checkpoint as ckpt
from minidist.parallel.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from minidist.parallel.tensor_parallel import ParallelMLP

ONE = comm.world()  # outside mpiexec: a job of one rank


def trained(seed: int, steps: int):
    """An MLP and its Adam after ``steps`` steps on random data."""
    model = md.nn.MLP([5, 8, 3], dtype=np.float64, rng=seed)
    opt = md.optim.Adam(model.parameters(), lr=0.01)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        opt.zero_grad()
        x, y = md.Tensor(rng.standard_normal((4, 5))), rng.integers(0, 3, 4)
        md.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return model, opt


def one_step(model, opt) -> list[np.ndarray]:
    x = md.Tensor(np.linspace(-1, 1, 20).reshape(4, 5))
    opt.zero_grad()
    md.nn.functional.cross_entropy(model(x), np.array([0, 1, 2, 0])).backward()
    opt.step()
    return [p.numpy().copy() for p in model.parameters()]


def test_a_checkpoint_restores_the_model_the_optimiser_the_generator_and_extra(tmp_path):
    model, opt = trained(seed=0, steps=3)
    rng = np.random.default_rng(7)
    rng.random(5)
    path = save_checkpoint(tmp_path, 3, model, opt, ONE, rng=rng, extra={"losses": [0.5, 0.25]})
    assert path == tmp_path / "step-00000003.npz" and latest_checkpoint(tmp_path) == path
    other, other_opt = trained(seed=1, steps=1)  # other weights, other moments, other count
    other_rng = np.random.default_rng(0)
    saved = load_checkpoint(tmp_path, other, other_opt, ONE, rng=other_rng)
    assert (saved.step, saved.extra, saved.path) == (3, {"losses": [0.5, 0.25]}, path)
    for mine, theirs in zip(model.parameters(), other.parameters(), strict=True):
        np.testing.assert_array_equal(theirs.numpy(), mine.numpy())
    assert other_rng.random() == rng.random()
    # the next step (Adam's moments and step count) is the same step
    for mine, theirs in zip(one_step(model, opt), one_step(other, other_opt), strict=True):
        np.testing.assert_array_equal(theirs, mine)


def test_a_checkpoint_restores_the_schedule_where_it_was(tmp_path):
    def with_schedule(seed, steps):
        model, opt = trained(seed, 0)
        scheduler = md.optim.LRScheduler(opt, md.optim.schedules.cosine(0.01, 10))
        for _ in range(steps):
            scheduler.step()
        return model, opt, scheduler

    model, opt, scheduler = with_schedule(0, 3)
    save_checkpoint(tmp_path, 3, model, opt, ONE, scheduler=scheduler)
    other, other_opt, other_scheduler = with_schedule(1, 0)  # built first, as in a first run
    with pytest.raises(ValueError, match="scheduler's state: pass scheduler="):
        load_checkpoint(tmp_path, other, other_opt, ONE)
    load_checkpoint(tmp_path, other, other_opt, ONE, scheduler=other_scheduler)
    scheduler.step()
    other_scheduler.step()  # on from step 3, not 0: the same rate, to the bit
    assert other_scheduler.step_count == 4 and other_scheduler.last_lr == scheduler.last_lr
    assert other_opt.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    save_checkpoint(tmp_path, 4, model, opt, ONE)
    with pytest.raises(ValueError, match="holds no learning-rate scheduler's state"):
        load_checkpoint(tmp_path, other, other_opt, ONE, scheduler=other_scheduler)


def test_no_checkpoint_changes_nothing(tmp_path):
    model, opt = trained(seed=0, steps=1)
    before = [p.numpy().copy() for p in model.parameters()]
    assert load_checkpoint(tmp_path / "absent", model, opt, ONE) is None
    assert load_checkpoint(tmp_path, model, opt, ONE) is None
    for param, value in zip(model.parameters(), before, strict=True):
        np.testing.assert_array_equal(param.numpy(), value)


def test_a_crash_while_writing_leaves_the_previous_checkpoint_newest(tmp_path, monkeypatch):
    model, opt = trained(seed=0, steps=1)
    first = save_checkpoint(tmp_path, 10, model, opt, ONE)

    def crash(file, **arrays):
        file.write(b"half a checkpoint")
        raise OSError("disk full")

    with monkeypatch.context() as patch:
        patch.setattr(ckpt.np, "savez", crash)
        with pytest.raises(OSError, match="disk full"):
            save_checkpoint(tmp_path, 20, model, opt, ONE)
    assert latest_checkpoint(tmp_path) == first  # the half-written file is no checkpoint
    assert load_checkpoint(tmp_path, model, opt, ONE).step == 10
    for step in (30, 40, 50):
        save_checkpoint(tmp_path, step, model, opt, ONE, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000040.npz",
                                                          "step-00000050.npz"]


def test_rank_0_writes_and_every_rank_reads(tmp_path):
    def run(c, folder):
        model, opt = trained(seed=0, steps=2)  # replicas, as data parallelism keeps them
        written = save_checkpoint(folder, 2, model, opt, c)
        c.barrier()
        model, opt = trained(seed=c.rank + 1, steps=1)  # each rank elsewhere, then resumed
        load_checkpoint(folder, model, opt, c)
        return written, [p.numpy() for p in model.parameters()]

    results = comm.launch(run, 3, args=(str(tmp_path),), backend="local")
    assert results[0][0] is not None and [r[0] for r in results[1:]] == [None, None]
    saved = [p.numpy() for p in trained(seed=0, steps=2)[0].parameters()]
    for _, params in results:
        for theirs, mine in zip(params, saved, strict=True):
            np.testing.assert_array_equal(theirs, mine)


def test_ranks_whose_models_differ_are_refused_on_every_rank_and_nothing_is_written(tmp_path):
    """A tensor-parallel model's slices (or replicas that drifted apart) were saved as rank
    0's alone, and a resume put rank 0's slice on every rank, silently."""
    def run(c, folder, parallel):
        if parallel:
            w = np.random.default_rng(0).standard_normal
            model = ParallelMLP(w((8, 4)), w(8), w((4, 8)), w(4), c)  # a slice per rank
            opt = md.optim.SGD(model.parameters(), lr=0.1)
        else:
            model, opt = trained(seed=int(c.rank == 2), steps=1)  # rank 2's has drifted
        with pytest.raises(ValueError, match=r"keeps one copy of the model, rank 0's, .*"
                                             r"but rank\(s\) \[(1|2)\] hold other parameters"):
            save_checkpoint(folder, 1, model, opt, c)
        return True

    for parallel, ranks in ((True, 2), (False, 3)):
        assert comm.launch(run, ranks, args=(str(tmp_path), parallel), backend="local") \
            == [True] * ranks
    assert not list(tmp_path.iterdir())


def test_bad_input_is_named(tmp_path):
    model, opt = trained(seed=0, steps=1)
    with pytest.raises(ValueError, match="keep must be >= 1, got 0"):
        save_checkpoint(tmp_path, 1, model, opt, ONE, keep=0)
    save_checkpoint(tmp_path, 1, model, opt, ONE, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="random generator's state: pass rng="):
        load_checkpoint(tmp_path, model, opt, ONE)
    with pytest.raises(ValueError, match="checkpoint_every must be >= 1 step, got 0"):
        mlp_ddp.train(ONE, checkpoint_dir=str(tmp_path), checkpoint_every=0)


def test_a_checkpoint_resumed_on_another_number_of_ranks_is_refused_on_every_rank(tmp_path):
    def run(c, folder, write):
        model, opt = trained(seed=0, steps=1)
        if write:
            save_checkpoint(folder, 1, model, opt, c)
            return None
        try:
            load_checkpoint(folder, model, opt, c)
        except ValueError as err:
            return str(err)
        return "loaded"

    comm.launch(run, 2, args=(str(tmp_path), True), backend="local")
    errors = comm.launch(run, 3, args=(str(tmp_path), False), backend="local")
    assert all("written by a run on 2 ranks, this one has 3: resume on 2 ranks" in e
               for e in errors), errors
    assert comm.launch(run, 2, args=(str(tmp_path), False), backend="local") == ["loaded"] * 2


@pytest.mark.timeout(120)
def test_mlp_ddp_resumed_in_the_middle_of_an_epoch_ends_as_if_never_stopped(tmp_path, capsys):
    # 23 steps an epoch, 46 in all, the learning rate warming up all along; checkpoints
    # at steps 20, 40 (within epochs) and 46 (the end), the last two kept
    options = dict(epochs=2, hidden=16, scale_lr=True, global_batch=64, progress=False,
                   checkpoint_every=20)
    whole = mlp_ddp.train(ONE, checkpoint_dir=str(tmp_path / "whole"), **options)
    stopped = tmp_path / "stopped"
    mlp_ddp.train(ONE, checkpoint_dir=str(stopped), **options)
    latest_checkpoint(stopped).unlink()  # as if killed between steps 40 and 46
    resumed = mlp_ddp.train(ONE, checkpoint_dir=str(stopped), **{**options, "progress": True})
    assert "step 40, epoch 1, batch 17" in capsys.readouterr().out
    assert resumed["losses"] == whole["losses"] and resumed["lr"] == whole["lr"]
    for mine, theirs in zip(whole["model"].parameters(), resumed["model"].parameters(),
                            strict=True):
        np.testing.assert_array_equal(theirs.numpy(), mine.numpy())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("change, said", [
    (dict(seed=5), "with seed 0, this one has 5: resume with seed 0"),
    (dict(global_batch=32), "with global_batch 64, this one has 32: resume with global_batch 64"),
])
def test_mlp_ddp_resumed_with_another_seed_or_batch_is_refused(tmp_path, change, said):
    """Both were taken: another seed split the digits anew and scored the model on samples
    it had trained on (99.4 %); another batch read the saved step in its own batches."""
    options = dict(epochs=1, hidden=8, global_batch=64, progress=False, checkpoint_every=10,
                   checkpoint_dir=str(tmp_path))
    mlp_ddp.train(ONE, **options)
    with pytest.raises(ValueError, match=said):
        mlp_ddp.train(ONE, **{**options, "epochs": 2, **change})


def test_mlp_ddp_resumed_past_its_epochs_says_how_far_the_model_went(tmp_path, capsys):
    """It printed "after 1 epochs" for a model trained 2 and resumed with --epochs 1."""
    options = ["--hidden", "8", "--global-batch", "64", "--checkpoint-dir", str(tmp_path)]
    mlp_ddp.main([*options, "--epochs", "2"])
    capsys.readouterr()
    assert mlp_ddp.main([*options, "--epochs", "1"])["epochs"] == 2
    assert "after 2 epochs (resumed past --epochs 1) on 1 ranks" in capsys.readouterr().out


def test_a_later_step_left_by_another_run_is_removed_not_the_one_just_written(tmp_path):
    """A run started afresh in a folder holding steps 500 and 1000 of an earlier one lost
    every save until step 1000 (the keep newest by name), and a resume took step 1000."""
    model, opt = trained(seed=0, steps=1)
    for step in (500, 1000):
        save_checkpoint(tmp_path, step, model, opt, ONE)
    (tmp_path / "step-best.npz").write_bytes(b"the user's own")
    written = save_checkpoint(tmp_path, 100, model, opt, ONE, keep=1)
    assert written.exists() and latest_checkpoint(tmp_path) == written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000100.npz", "step-best.npz"]


def test_a_checkpoint_file_instead_of_its_folder_is_refused(tmp_path):
    """It returned None: the run started from scratch without a word."""
    model, opt = trained(seed=0, steps=1)
    path = save_checkpoint(tmp_path, 10, model, opt, ONE)
    with pytest.raises(ValueError, match="is a file; pass the folder that holds"):
        load_checkpoint(path, model, opt, ONE)


def test_a_refused_optimiser_state_leaves_the_model_as_it_was(tmp_path):
    """The model was loaded before the optimiser refused another optimiser's state."""
    model, opt = trained(seed=0, steps=2)
    save_checkpoint(tmp_path, 2, model, opt, ONE)
    other = md.nn.MLP([5, 8, 3], dtype=np.float64, rng=1)
    before = [p.numpy().copy() for p in other.parameters()]
    with pytest.raises(ValueError, match="another optimizer's"):
        load_checkpoint(tmp_path, other, md.optim.SGD(other.parameters(), lr=0.1), ONE)
    for param, value in zip(other.parameters(), before, strict=True):
        np.testing.assert_array_equal(param.numpy(), value)


def test_optimiser_state_takes_the_dtype_of_the_model_it_resumes(tmp_path):
    """A float32 run's Adam moments stayed float32 in a float64 model resumed from it."""
    model = md.nn.MLP([5, 8, 3], dtype=np.float32, rng=0)
    opt = md.optim.Adam(model.parameters(), lr=0.01)
    one_step(model, opt)
    save_checkpoint(tmp_path, 1, model, opt, ONE)
    wide = md.nn.MLP([5, 8, 3], dtype=np.float64, rng=0)
    wide_opt = md.optim.Adam(wide.parameters(), lr=0.01)
    load_checkpoint(tmp_path, wide, wide_opt, ONE)
    states = [a for entry in wide_opt.state.values() for a in entry.values()
              if hasattr(a, "dtype") and np.dtype(a.dtype).kind == "f"]
    assert states and all(np.dtype(a.dtype) == np.float64 for a in states)


def test_rng_given_for_a_checkpoint_that_holds_none_is_refused(tmp_path):
    """The generator stayed at its seed while the model went on from the checkpoint."""
    model, opt = trained(seed=0, steps=1)
    save_checkpoint(tmp_path, 1, model, opt, ONE)
    with pytest.raises(ValueError, match="holds no random generator's state"):
        load_checkpoint(tmp_path, model, opt, ONE, rng=np.random.default_rng(0))


def test_a_damaged_checkpoint_is_named_with_the_way_on(tmp_path):
    """A truncated newest file raised a bare BadZipFile naming nothing."""
    model, opt = trained(seed=0, steps=1)
    save_checkpoint(tmp_path, 1, model, opt, ONE)
    newest = save_checkpoint(tmp_path, 2, model, opt, ONE)
    newest.write_bytes(newest.read_bytes()[:200])
    with pytest.raises(ValueError, match=r"step-00000002\.npz is no readable checkpoint .*"
                                         r"remove it to resume from the one before"):
        load_checkpoint(tmp_path, model, opt, ONE)
    newest.unlink()
    assert load_checkpoint(tmp_path, model, opt, ONE).step == 1
