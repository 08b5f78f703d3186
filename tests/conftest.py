"""Registers one pytest marker per graded lab task (the grade ids of solutions/*/*.ipynb),
keeps hypothesis off the wall clock, and sets up the strict-device guard (below).

No test may depend on the machine's speed (README, Testing): hypothesis
would fail an example that runs past its 200 ms deadline, or data that is
slow to generate, on a busy machine. Neither is a bug, so this profile turns
both off for every property test, including ones written later.
"""

import functools
import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"

settings.register_profile("any_machine_speed", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("any_machine_speed")


def pytest_configure(config):
    if STRICT:
        for name in ("assert_allclose", "assert_array_equal", "assert_equal",
                     "assert_array_almost_equal", "assert_almost_equal", "assert_array_less"):
            setattr(np.testing, name, _on_host(getattr(np.testing, name)))
    for notebook in sorted(SOLUTIONS.glob("*/*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("grade") and not meta.get("solution"):
                config.addinivalue_line("markers", f"{meta['grade_id']}: {notebook.stem} task")


# ---- the strict-device guard (README, Testing) ---------------------------------------------------
# `MINIDIST_DEVICE=strict pytest` (make test's last line) runs the device-agnostic tests below with
# arrays that refuse what cupy refuses (minidist/backend_strict.py): the library must compute
# through minidist.backend and copy to the host only where it says so. A test's own comparison
# is such a place: numpy.testing's assertions take explicit host copies, as cupy.testing's do.
STRICT = os.environ.get("MINIDIST_DEVICE", "").strip().lower() == "strict"
STRICT_FILES = {
    "test_autograd.py", "test_nn.py", "test_optim.py", "test_data.py", "test_sampler.py",
    "test_checkpoint.py", "test_mlp_example.py", "test_ddp.py", "test_tensor_parallel.py",
    "test_zero.py",
    "test_glove_device.py",
    "test_strict_device.py",
}
# tests whose own inputs are host arrays handed to device code (a numpy .grad, a numpy operand
# of a tensor): the library is right to refuse them; they need inputs made through the backend
HOST_INPUTS = "its inputs are numpy arrays mixed with device ones (test code, not the library)"
STRICT_SKIPS = {
    "test_autograd.py": {"test_matmul_with_constant_operand": HOST_INPUTS,
                         "test_float32_stays_float32": HOST_INPUTS,
                         "test_leaf_gradients_never_share_memory": "reads numpy's flags.writeable"},
    "test_nn.py": {"test_layer_norm_normalises_rows_and_passes_finite_differences": HOST_INPUTS},
    "test_optim.py": {name: HOST_INPUTS for name in (
        "test_update_rules_match_numpy_reference", "test_float32_stays_float32_and_in_place",
        "test_updates_run_on_blocks_of_any_shape_and_layout", "test_update_rules_match_torch_optim",
        "test_parameters_without_gradient_are_skipped",
        "test_param_groups_have_their_own_hyper_parameters",
        "test_optimizer_state_dict_resumes_exactly",
        "test_adam_minimises_a_quadratic_through_autograd",
        "test_lookahead_matches_reference")},
    "test_ddp.py": {"test_bucket_flags_count_users_and_leave_unused_grads_none": HOST_INPUTS},
}


def _on_host(assertion):
    from minidist.backend import on_device, to_numpy

    def check(*args, **kwargs):
        return assertion(*(to_numpy(a) if on_device(a) else a for a in args),
                         **{k: to_numpy(v) if on_device(v) else v for k, v in kwargs.items()})
    return functools.wraps(assertion)(check)


def pytest_ignore_collect(collection_path, config):
    if STRICT and collection_path.suffix == ".py" and collection_path.name not in STRICT_FILES:
        return True
    return None


def pytest_collection_modifyitems(config, items):
    if not STRICT:
        return
    for item in items:
        reason = STRICT_SKIPS.get(item.path.name, {}).get(item.originalname)
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"strict device: {reason}"))
