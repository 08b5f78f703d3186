"""Registers one pytest marker per graded lab task (the grade ids of solutions/*/*.ipynb),
keeps hypothesis off the wall clock, and sets up the device tiers (below).

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
    if ON_DEVICE:
        for name in ("assert_allclose", "assert_array_equal", "assert_equal",
                     "assert_array_almost_equal", "assert_almost_equal", "assert_array_less"):
            setattr(np.testing, name, _on_host(getattr(np.testing, name)))
    for notebook in sorted(SOLUTIONS.glob("*/*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("grade") and not meta.get("solution"):
                config.addinivalue_line("markers", f"{meta['grade_id']}: {notebook.stem} task")


# ---- the device tiers (README, Testing) ---------------------------------------------------------
# `MINIDIST_DEVICE=cuda pytest` on a machine with a GPU, and `MINIDIST_DEVICE=strict pytest` (make
# test's last line, CI's guard) run the device-agnostic tests below on that device; the strict one
# has arrays that refuse what cupy refuses (minidist/backend_strict.py): the library must compute
# through minidist.backend and copy to the host only where it says so. A test's own comparison
# is such a place: numpy.testing's assertions take explicit host copies, as cupy.testing's do.
ON_DEVICE = os.environ.get("MINIDIST_DEVICE", "").strip().lower() in ("strict", "cuda")
DEVICE_FILES = {
    "test_autograd.py", "test_nn.py", "test_optim.py", "test_data.py", "test_sampler.py",
    "test_checkpoint.py", "test_mlp_example.py", "test_ddp.py", "test_tensor_parallel.py",
    "test_zero.py", "test_moe.py", "test_pipeline.py", "test_parallel_grid.py", "test_memory.py",
    "test_transport_local.py", "test_collectives.py", "test_device_p2p.py", "test_ps_keys.py",
    "test_glove_device.py", "test_glove_gpu.py", "test_strict_device.py",
    "test_examples_device.py", "test_optim_state.py", "test_ddp_failures.py",
    "test_zero_checkpoint.py",
}


@pytest.fixture
def strict():
    """The strict device for one test (its array module), whatever MINIDIST_DEVICE says."""
    from minidist import backend

    before = backend.get_device()
    backend.set_device("strict")
    yield backend.xp()
    backend.set_device(before)


def _on_host(assertion):
    from minidist.backend import on_device, to_numpy

    def check(*args, **kwargs):
        return assertion(*(to_numpy(a) if on_device(a) else a for a in args),
                         **{k: to_numpy(v) if on_device(v) else v for k, v in kwargs.items()})
    return functools.wraps(assertion)(check)


def pytest_ignore_collect(collection_path, config):
    if ON_DEVICE and collection_path.suffix == ".py" and collection_path.name not in DEVICE_FILES:
        return True
    return None
