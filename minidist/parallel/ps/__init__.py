"""Parameter servers (Lecture 5): servers hold sharded parameters, workers pull and push.

- ``keys.py``: tables of rows in one key space, one key range per server;
- ``messages.py``: the requests (push, pull, clock, checkpoint, stop) and answers;
- ``consistency.py``: BSP, ASP and SSP(s), the rule a server applies to a read;
- ``rules.py``: the server's update of its shard (SGD, AdaGrad, Adam) and
  staleness-aware SGD with n-softsync;
- ``server.py``, ``worker.py``: the two sides; ``parameter_server.py``: the roles;
- ``checkpoint.py``: shards saved atomically, runs resumed.
"""

from minidist.parallel.ps.consistency import ASP, BSP, SSP, Consistency, StalenessLog, consistency
from minidist.parallel.ps.keys import KeyLayout
from minidist.parallel.ps.parameter_server import ParameterServer, gather_reports
from minidist.parallel.ps.rules import ServerOptimizer, staleness_lr
from minidist.parallel.ps.server import ServerReport
from minidist.parallel.ps.worker import Worker

__all__ = ["ASP", "BSP", "SSP", "Consistency", "KeyLayout", "ParameterServer", "ServerOptimizer",
           "ServerReport", "StalenessLog", "Worker", "consistency", "gather_reports",
           "staleness_lr"]
