"""Small helpers every layer may use: splitting work into parts (and, as they land,
process trees, the mpiexec environment, seeded shuffles, verified downloads)."""

from minidist.util.parts import chunk_bounds

__all__ = ["chunk_bounds"]
