"""Errors a distributed run raises instead of hanging.

- :class:`CommError`: a communication that can never complete (a receive
  nobody will match, a deadlock, a peer that failed or finished);
  :class:`PeerFailed`, when MPI itself reports peers' processes failed
  (an MPI with fault tolerance, ULFM: Open MPI's ``mpiexec --with-ft ulfm``).
- :class:`RankFailure`: a failure injected into a rank on purpose.
- :class:`RankError`: what the caller of a multi-rank run sees: the rank,
  its exception type and message, and its traceback text;
  :class:`RankKilled`, when the rank's process was killed and raised nothing.
"""

from __future__ import annotations


class CommError(RuntimeError):
    """A point-to-point operation or barrier that can never complete."""


class PeerFailed(CommError):
    """MPI reported that the processes of ``ranks`` (of the communicator) failed."""

    def __init__(self, ranks: list[int], detail: str) -> None:
        self.ranks = list(ranks)
        super().__init__(f"rank{'s' if len(self.ranks) > 1 else ''} "
                         f"{', '.join(map(str, self.ranks))} failed ({detail})")


class RankFailure(CommError):
    """Raised inside a rank that was told to fail (failure injection)."""


class RankError(RuntimeError):
    """Rank ``rank`` raised; ``traceback_text`` is its formatted traceback."""

    def __init__(self, rank: int, summary: str, traceback_text: str = "") -> None:
        self.rank = rank
        self.summary = summary
        self.traceback_text = traceback_text
        text = f"rank {rank} raised {summary}"
        if traceback_text:
            text += f"\n--- traceback of rank {rank} ---\n{traceback_text.rstrip()}"
        super().__init__(text)


class RankKilled(RankError):
    """Rank ``rank``'s process was ended by a signal (``how``: "rank 1 (pid 4242 on host)
    was killed by SIGKILL"): no exception, no traceback, only how it ended."""

    def __init__(self, rank: int, how: str) -> None:
        self.rank, self.summary, self.traceback_text = rank, how, ""
        RuntimeError.__init__(self, how)
