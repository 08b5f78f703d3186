"""The MLP example trains the course's model to its promised accuracy on the digits."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from minidist.examples import mlp as example


@pytest.mark.timeout(60)
def test_default_run_reaches_97_percent_and_is_repeatable():
    first = example.train(seed=0, progress=False)
    assert first["accuracy"] >= 0.97
    assert len(first["losses"]) == 20
    assert first["losses"][-1] < first["losses"][0] / 10
    again = example.train(epochs=3, seed=0, progress=False)
    np.testing.assert_array_equal(again["losses"], first["losses"][:3])


@pytest.mark.timeout(60)
def test_sgd_learns_too():
    result = example.train(epochs=5, optimizer="sgd", lr=0.05, hidden=64, progress=False)
    assert result["accuracy"] >= 0.9
    assert result["losses"] == sorted(result["losses"], reverse=True)


@pytest.mark.timeout(60)
def test_command_line_prints_losses_and_accuracy():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "minidist.examples.mlp", "--epochs", "2", "--batch-size", "64",
         "--optimizer", "adam", "--lr", "0.01", "--hidden", "32", "--seed", "1"],
        capture_output=True, text=True, timeout=50, env=env)
    assert run.returncode == 0, run.stderr
    output = run.stdout + run.stderr
    assert "epoch   1  train loss" in output and "epoch   2  train loss" in output
    assert "test accuracy" in output


def test_unknown_optimizer_is_an_error():
    with pytest.raises(ValueError, match="optimizer"):
        example.make_optimizer("rmsprop", [], 0.1)
