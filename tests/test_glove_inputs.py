"""GloVe's options as a user passes them: x_max, alpha and eta are refused by name when
they would train nothing, or NaNs, at every entry point that takes them."""

from __future__ import annotations

import numpy as np
import pytest

from minidist import glove

ROW, COL, VAL = np.array([0, 1, 1]), np.array([1, 0, 1]), np.array([3.0, 3.0, 50.0])
NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("option, value", [
    *(("x_max", x_max) for x_max in (-5.0, 0, NAN, INF, "100", True, None)),
    *(("alpha", alpha) for alpha in (-0.75, NAN, INF, None)),
])
def test_x_max_and_alpha_are_refused_by_name(option, value):
    """x_max a finite number > 0 (-5 gave NaN weights, reported as a cost of 0, or f = 1
    by glove.c's rule), alpha one >= 0, wherever the weighting is computed."""
    model, options = glove.GloVe.create(2, 3), {option: value}
    for call in (lambda: glove.Records.from_counts(ROW, COL, VAL, **options),
                 lambda: glove.train_records(model, glove.to_records(ROW, COL, VAL), 1,
                                             **options)):
        with pytest.raises(ValueError, match=f"{option} must be a finite number"):
            call()


@pytest.mark.parametrize("eta", [-0.05, 0.0, NAN, INF, None])
def test_eta_must_be_a_finite_number_above_zero(eta):
    model, records = glove.GloVe.create(2, 3), glove.Records.from_counts(ROW, COL, VAL)
    before = model.copy()
    calls = {
        "train": lambda: glove.train(model, records, 2, batch_size=2, eta=eta),
        "fit": lambda: glove.fit(glove.Strategy(), model, records, 2, eta=eta),
        "train_epoch": lambda: glove.train_epoch(model, records, None, eta=eta),
        "train_hogwild": lambda: glove.train_hogwild(model, records, 2, 1, eta=eta),
        "train_records": lambda: glove.train_records(model, glove.to_records(ROW, COL, VAL),
                                                     1, eta=eta),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match="eta must be a finite number"):
            call()
        assert np.array_equal(model.word, before.word), name  # refused before any step


def test_the_edges_that_are_valid_train():
    """alpha = 0 (f = 1 everywhere), an integer x_max and a small eta are options glove.c
    takes too; they train as their float values do."""
    for options in ({"alpha": 0}, {"x_max": 10}, {"x_max": 1e-3}):
        records = glove.Records.from_counts(ROW, COL, VAL, **options)
        assert np.all(np.isfinite(records.weight)) and records.weight.max() <= 1.0
    assert np.array_equal(glove.Records.from_counts(ROW, COL, VAL, alpha=0).weight, [1, 1, 1])
    same = [glove.train_records(glove.GloVe.create(2, 3), glove.to_records(ROW, COL, VAL), 2,
                                x_max=x_max).costs for x_max in (10, 10.0)]
    assert same[0] == same[1]
    assert all(np.isfinite(glove.train(glove.GloVe.create(2, 3),
                                       glove.Records.from_counts(ROW, COL, VAL), 2, eta=1e-6)))
