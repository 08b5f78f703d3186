"""The α-β-γ network model: three numbers that price every message.

Sending one message of ``n`` bytes costs ``alpha + beta · n`` seconds: a
fixed latency α (software, NIC, switch) plus the time to push the bytes
through the link (β = 1 / bandwidth). Reducing ``n`` bytes costs
``gamma · n`` more. Every cost formula of the course is written with these
three letters, and the in-process transport advances its virtual clocks by
exactly these amounts, so a formula and a simulated run can be compared
to the last digit.

Where the numbers come from:

1. a fit saved by ``python -m minidist.bench.fit`` at
   :func:`network_model_path` (``$MINIDIST_NETWORK``, else
   ``~/.cache/minidist/network.json``), a JSON object with keys
   ``alpha``, ``beta``, ``gamma`` (other keys are ignored);
2. otherwise the defaults below, measured on the course's build machine:
   MPI ping-pong between two ranks of one host (mpi4py buffer methods,
   MPICH shared memory) took 1.5 µs one way for 8 bytes and reached
   6.8 GB/s for 8 MiB; an in-place float64 ``np.add`` ran at ~20 GB/s.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

DEFAULT_ALPHA = 1.5e-6  # seconds per message (one-way latency)
DEFAULT_BETA = 1.5e-10  # seconds per byte (6.8 GB/s)
DEFAULT_GAMMA = 5e-11  # seconds per byte reduced (20 GB/s)


@dataclass(frozen=True)
class NetworkModel:
    """Costs of the α-β-γ model, in seconds."""

    alpha: float = DEFAULT_ALPHA
    beta: float = DEFAULT_BETA
    gamma: float = DEFAULT_GAMMA

    def message_time(self, nbytes: int) -> float:
        """Seconds to move one message of ``nbytes``: ``alpha + beta · nbytes``."""
        return self.alpha + self.beta * nbytes

    def reduce_time(self, nbytes: int) -> float:
        """Seconds to combine ``nbytes`` into an accumulator: ``gamma · nbytes``."""
        return self.gamma * nbytes


def network_model_path() -> Path:
    """Where the fitted model is saved and looked for."""
    env = os.environ.get("MINIDIST_NETWORK")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "minidist" / "network.json"


def load_network_model(path: str | os.PathLike | None = None) -> NetworkModel:
    """The saved fit if there is one, else the built-in defaults."""
    path = Path(path) if path is not None else network_model_path()
    if not path.exists():
        return NetworkModel()
    try:
        saved = json.loads(path.read_text())
        return NetworkModel(float(saved["alpha"]), float(saved["beta"]), float(saved["gamma"]))
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a network model ({err}); delete it or refit") from err


def save_network_model(model: NetworkModel, path: str | os.PathLike | None = None,
                       **extra: object) -> Path:
    """Write ``model`` (and any ``extra`` notes, e.g. the host) as JSON; returns the path."""
    path = Path(path) if path is not None else network_model_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**asdict(model), **extra}, indent=2) + "\n")
    return path
