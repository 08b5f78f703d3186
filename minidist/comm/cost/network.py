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
lone message is priced at its own size. The formulas of ``cost/model.py`` keep
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

**Ranks that share a host share its memory bus** (an option, for predicting
MPI runs; the in-process transport's clock never uses it). Every link above
is independent: a ring step costs the same on 2 ranks as on 16. On one
host it does not: every message is a copy by a CPU core, every reduction
streams memory, and the cores share one memory bus. So the model may carry
a ``host_curve``: points ``(nbytes, copy_bandwidth, host_bandwidth)``, the
bytes per second one rank copies alone (B_1) and all the host's ranks
copy together at most (B_host), measured on vectors of that size by
``bench.fit`` (k concurrent copies, k = 1 up to the host's cores). The rule:
in a step where k ranks of one host copy or reduce at once, each gets at most
B_host / k of the bus; alone a rank streams at B_1 (copying or adding alike),
so an operation that alone takes ``t`` (its bytes part: ``beta·n`` or
``gamma·n``; alpha is not memory) takes ``b / min(B_1, B_host / k)`` for its
``b = t·B_1`` bytes of traffic:

    t · max(1, k / S) / max(1, 2 / S),     S = B_host / B_1

where S is how many ranks stream at full speed before the bus is full, and
the divisor undoes the sharing already inside β and γ (they are fitted with
two ranks at once). :meth:`NetworkModel.sharing` gives that factor;
``cost.predict`` applies it with each algorithm's k (``model.STREAMS``).
``ranks_per_host`` caps k (0: every rank on one host).

Where it stops: one host, vectors priced at one point of the curve (a
collective whose pieces fit in a cache while the whole does not is priced
as the whole); k is the number of ranks busy in an algorithm's widest step
(an upper bound for a tree's upper levels); across hosts the network card,
not the bus, is shared, and nothing here models that (``ranks_per_host``
only caps k). A rank waiting for a core (more ranks than cores) is no part
of it either.
"""

from __future__ import annotations

import json
import math
import os
from bisect import bisect_left
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from minidist.util.values import finite, whole

DEFAULT_ALPHA = 1.5e-6  # seconds per message (one-way latency)
DEFAULT_BETA = 1.5e-10  # seconds per byte
DEFAULT_GAMMA = 5e-11  # seconds per byte reduced

FIT_RANKS = 2  # beta and gamma are fitted with this many ranks of one host at once

CurvePoint = tuple[int, float, float]  # (message bytes, beta there, gamma there)
HostPoint = tuple[int, float, float]  # (vector bytes, B_1 alone, B_host all), bytes/s


@dataclass(frozen=True)
class NetworkModel:
    """Costs of the α-β-γ model, in seconds; ``curve`` makes β and γ depend on size."""

    alpha: float = DEFAULT_ALPHA
    beta: float = DEFAULT_BETA
    gamma: float = DEFAULT_GAMMA
    curve: tuple[CurvePoint, ...] = ()  # sorted by size; empty: beta and gamma everywhere
    host_curve: tuple[HostPoint, ...] = ()  # empty: every link independent (the clock's rule)
    ranks_per_host: int = 0  # ranks that share one memory bus; 0: all of them

    def __post_init__(self) -> None:
        for name in ("alpha", "beta", "gamma"):  # a negative or NaN price breaks every clock
            object.__setattr__(self, name, finite(name, getattr(self, name)))
        for name in ("curve", "host_curve"):
            points = tuple((int(n), float(a), float(b)) for n, a, b in getattr(self, name))
            sizes = [n for n, _, _ in points]
            if any(n <= 0 for n in sizes) or any(b <= a for a, b in zip(sizes, sizes[1:],
                                                                       strict=False)):
                raise ValueError(f"{name}: points must have positive, increasing sizes")
            object.__setattr__(self, name, points)
        if not all(math.isfinite(b) and math.isfinite(g) and b >= 0 and g >= 0
                   for _, b, g in self.curve):
            raise ValueError("curve: beta and gamma must be finite numbers >= 0")
        if not all(math.isfinite(alone) and math.isfinite(together) and alone > 0
                   and together > 0 for _, alone, together in self.host_curve):
            raise ValueError("host_curve: bandwidths must be finite and positive")
        object.__setattr__(self, "ranks_per_host", whole("ranks_per_host", self.ranks_per_host))

    def beta_at(self, nbytes: int) -> float:
        """Seconds per byte of a message of ``nbytes`` (β read off the curve)."""
        return _read(self.curve, nbytes, 1) if self.curve else self.beta

    def gamma_at(self, nbytes: int) -> float:
        """Seconds per byte of reducing ``nbytes`` at once (γ read off the curve)."""
        return _read(self.curve, nbytes, 2) if self.curve else self.gamma

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
        return replace(self, beta=self.beta_at(nbytes), gamma=self.gamma_at(nbytes), curve=())

    def sharing(self, k: int, nbytes: int) -> float:
        """How much slower than fitted a byte moves when ``k`` ranks of one host copy or
        reduce ``nbytes``-byte vectors at once: ``max(1, k/S) / max(1, 2/S)`` (1 without a
        ``host_curve``: independent links)."""
        if not self.host_curve:
            return 1.0
        k = min(k, self.ranks_per_host) if self.ranks_per_host else k
        streams = _read(self.host_curve, nbytes, 2) / _read(self.host_curve, nbytes, 1)
        return max(1.0, k / streams) / max(1.0, FIT_RANKS / streams)

    def shared(self, k: int, nbytes: int) -> NetworkModel:
        """The flat, independent-link model of a collective on ``nbytes`` in which ``k``
        ranks of one host stream memory at once (:meth:`sharing` applied to β and γ)."""
        flat, slower = self.at(nbytes), self.sharing(k, nbytes)
        return replace(flat, beta=flat.beta * slower, gamma=flat.gamma * slower,
                       host_curve=())



def _read(curve: tuple[tuple[int, float, float], ...], nbytes: int, column: int) -> float:
    """Interpolate ``column`` of ``curve`` at ``nbytes``, linearly in log2 of the size
    (held flat outside its points)."""
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


def load_network_model(path: str | os.PathLike | None = None,
                       host: bool = False) -> NetworkModel:
    """The saved fit if there is one, else the built-in defaults.

    ``host=True`` adds the fitted ``host_curve`` (to predict MPI runs on one
    host); by default links stay independent, as the in-process clock prices them.
    """
    path = Path(path) if path is not None else network_model_path()
    if not path.exists():
        return NetworkModel()
    try:
        saved = json.loads(path.read_text())
        return NetworkModel(float(saved["alpha"]), float(saved["beta"]), float(saved["gamma"]),
                            tuple(tuple(point) for point in saved.get("curve", ())),
                            tuple(tuple(point) for point in saved.get("host_curve", ()))
                            if host else ())
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a network model ({err}); delete it or refit") from err


def save_network_model(model: NetworkModel, path: str | os.PathLike | None = None,
                       **extra: object) -> Path:
    """Write ``model`` (and any ``extra`` notes, e.g. the host) as JSON; returns the path."""
    path = Path(path) if path is not None else network_model_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**asdict(model), **extra}, indent=2) + "\n")
    return path
