"""Parameter servers (Lecture 5): servers hold sharded parameters, workers pull and push.

The machinery:

- ``keys.py``: tables of rows in one key space, one key range per server;
- ``messages.py``: the requests (push, pull, clock, checkpoint, stop) and answers;
- ``consistency.py``: BSP, ASP and SSP(s), the rule a server applies to a read;
- ``rules.py``: the server's update of its shard (SGD, AdaGrad, Adam) and
  staleness-aware SGD with n-softsync;
- ``server.py``, ``worker.py``: the two sides; ``parameter_server.py``: the roles;
- ``plans.py``: beneath them, what a request works out once per key set (routing,
  packing, the values' places), not per call;
- ``checkpoint.py``: shards saved atomically, runs resumed.

What the lecture does with it:

- ``training.py``: the digits MLP trained through a parameter server;
- ``simulator.py``: staleness-aware SGD at growing λ, and the straggler race;
- ``hotspots.py``: a recommendation model on power-law ids, hot keys replicated;
- ``sparse_race.py``: Hogwild against a parameter server on the same sparse problem;
- ``fedavg.py``: federated averaging over IID and non-IID clients.
"""

from importlib import import_module
from typing import Any

from minidist.parallel.ps.consistency import ASP, BSP, SSP, Consistency, StalenessLog, consistency
from minidist.parallel.ps.hotspots import choose_hot_keys, train_mf
from minidist.parallel.ps.keys import KeyLayout
from minidist.parallel.ps.parameter_server import ParameterServer, gather_reports
from minidist.parallel.ps.rules import ServerOptimizer, staleness_lr
from minidist.parallel.ps.server import ServerReport
from minidist.parallel.ps.worker import Worker

# Built on minidist.models, which imports GloVe, which builds on minidist.parallel:
# resolved on first use.
_ON_MODELS = {"PSRun": "training", "train_mlp": "training", "simulate": "simulator",
              "straggler_race": "simulator", "FedRun": "fedavg", "fedavg": "fedavg"}

__all__ = ["ASP", "BSP", "SSP", "Consistency", "FedRun", "KeyLayout", "PSRun", "ParameterServer",
           "ServerOptimizer", "ServerReport", "StalenessLog", "Worker", "choose_hot_keys",
           "consistency", "fedavg", "gather_reports", "simulate", "staleness_lr",
           "straggler_race", "train_mf", "train_mlp"]


def __getattr__(name: str) -> Any:
    if name not in _ON_MODELS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_ON_MODELS[name]}"), name)
