"""The α-β-γ network model, and why one β is not enough on a real machine.

Sending one message of ``n`` bytes costs ``alpha + beta · n`` seconds: a
fixed latency α (software, NIC, switch) plus the time to push the bytes
through the link (β = 1 / bandwidth). Reducing ``n`` bytes costs
``gamma · n`` more. Every cost formula of the course is written with these
three letters, and the in-process transport advances its virtual clocks by
exactly these amounts, so a formula and a simulated run can be compared
to the last digit.

**Real machines have a bandwidth curve, not a bandwidth.** Between two
ranks on one host, MPI moves a message by copying it through shared
memory, so β is the speed of a memory copy, and that depends on where the
bytes live. A vector that fits in a core's cache is copied and added at
cache speed; a longer one streams from DRAM, slower, and two ranks copying
at once share one memory bus. Bytes the CPU has just written (the gradient
an allreduce is given, the partial sum it has just added) copy slower still
than clean ones: they must first leave the writer's cache. So one β and γ
fitted on long vectors overprice the medium ones, and fitted on medium
ones they underprice long ones (the README's benchmark notes give the
figures of the course's machine). Across hosts the network card is the
bottleneck and one β is closer to the truth, though the same cache effects
appear at each end.

So the model may carry a ``curve``: points ``(nbytes, beta, gamma)``
measured at several sizes (``python -m minidist.bench.fit`` measures them
every factor of 2). For a message of ``n`` bytes, β(n) and γ(n) are read
off the curve, interpolated on a straight line in ``log2 n`` between the
two nearest points (held flat outside them); ``alpha``, ``beta`` and
``gamma`` remain the textbook constants, used where there is no curve:

    m(n) = alpha + beta(n) · n          r(n) = gamma(n) · n

Which n? Where the bytes live depends on all the memory a collective
touches, so an allreduce on an N-byte vector prices every one of its
messages and reductions at β(N) and γ(N) (:meth:`NetworkModel.at`), while a
lone message is priced at its own size. The formulas of ``cost.py`` keep
their shape; only the price of a byte now depends on the size of the job.

Where the numbers come from:

1. a fit saved by ``python -m minidist.bench.fit`` (α there is the latency
   of one exchange *through this library*, several times MPI's own: Python
   bookkeeping is part of every message it sends) at
   :func:`network_model_path` (``$MINIDIST_NETWORK``, else
   ``~/.cache/minidist/network.json``), a JSON object with keys
   ``alpha``, ``beta``, ``gamma`` and optionally ``curve`` (other keys are
   ignored); ``LocalCluster`` and ``cost.predict`` use it only when given
   ``load_network_model()``, so that a notebook's clocks read the same on
   every machine;
2. otherwise the defaults below: round figures of an MPI ping-pong between
   two ranks of one host (mpi4py buffer methods, MPICH shared memory) and of
   an in-place ``np.add``.
"""

from __future__ import annotations

import json
import math
import os
from bisect import bisect_left
from dataclasses import asdict, dataclass
from pathlib import Path

DEFAULT_ALPHA = 1.5e-6  # seconds per message (one-way latency)
DEFAULT_BETA = 1.5e-10  # seconds per byte
DEFAULT_GAMMA = 5e-11  # seconds per byte reduced

CurvePoint = tuple[int, float, float]  # (message bytes, beta there, gamma there)


@dataclass(frozen=True)
class NetworkModel:
    """Costs of the α-β-γ model, in seconds; ``curve`` makes β and γ depend on size."""

    alpha: float = DEFAULT_ALPHA
    beta: float = DEFAULT_BETA
    gamma: float = DEFAULT_GAMMA
    curve: tuple[CurvePoint, ...] = ()  # sorted by size; empty: beta and gamma everywhere

    def __post_init__(self) -> None:
        points = tuple((int(n), float(b), float(g)) for n, b, g in self.curve)
        if any(n <= 0 for n, _, _ in points) or list(points) != sorted(points):
            raise ValueError("curve: points must have positive, increasing sizes")
        object.__setattr__(self, "curve", points)

    def beta_at(self, nbytes: int) -> float:
        """Seconds per byte of a message of ``nbytes`` (β read off the curve)."""
        return self._read(nbytes, 1) if self.curve else self.beta

    def gamma_at(self, nbytes: int) -> float:
        """Seconds per byte of reducing ``nbytes`` at once (γ read off the curve)."""
        return self._read(nbytes, 2) if self.curve else self.gamma

    def message_time(self, nbytes: int) -> float:
        """Seconds to move one message of ``nbytes``: ``alpha + beta(n) · n``."""
        return self.alpha + self.beta_at(nbytes) * nbytes

    def reduce_time(self, nbytes: int) -> float:
        """Seconds to combine ``nbytes`` into an accumulator: ``gamma(n) · n``."""
        return self.gamma_at(nbytes) * nbytes

    def at(self, nbytes: int) -> NetworkModel:
        """The flat model for the messages of a collective on an ``nbytes`` vector.

        Whether bytes come from cache depends on everything the collective
        touches, not on one message: a ring on 64 MiB sends 32 MiB pieces
        that stream from DRAM although a lone 32 MiB message would not, and
        a tree cuts 64 MiB into 4 MiB segments that are no faster than the
        whole. So a collective prices all of its messages and reductions at
        β and γ read at the vector's size (a model without a curve: itself).
        """
        if not self.curve:
            return self
        return NetworkModel(self.alpha, self.beta_at(nbytes), self.gamma_at(nbytes))

    def _read(self, nbytes: int, column: int) -> float:
        """Interpolate ``column`` of the curve at ``nbytes``, linearly in log2 of the size."""
        curve = self.curve
        k = bisect_left(curve, (nbytes,))
        if k == 0 or nbytes <= 0:
            return curve[0][column]
        if k == len(curve):
            return curve[-1][column]
        (n0, *low), (n1, *high) = curve[k - 1], curve[k]
        if nbytes == n1:
            return high[column - 1]
        share = math.log2(nbytes / n0) / math.log2(n1 / n0)
        return low[column - 1] + share * (high[column - 1] - low[column - 1])


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
        return NetworkModel(float(saved["alpha"]), float(saved["beta"]), float(saved["gamma"]),
                            tuple(tuple(point) for point in saved.get("curve", ())))
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a network model ({err}); delete it or refit") from err


def save_network_model(model: NetworkModel, path: str | os.PathLike | None = None,
                       **extra: object) -> Path:
    """Write ``model`` (and any ``extra`` notes, e.g. the host) as JSON; returns the path."""
    path = Path(path) if path is not None else network_model_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**asdict(model), **extra}, indent=2) + "\n")
    return path
