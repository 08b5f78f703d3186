"""Benchmarks: each prints its figures beside a peer measured in the same run, and says which
targets are met or missed (the record behind the README's figures: ``bench/README.md``).

Run with ``python -m minidist.bench.NAME --help``: ``allreduce``, ``autograd``,
``checkpointing``, ``ddp``, ``fit``, ``glove``, ``model_parallel``, ``moe``,
``pipeline``, ``placement``, ``ps``, ``scaling``, ``simulator``, ``zero``.

The other modules are parts of those and do nothing when run: ``pricing`` and
``host_bus`` (the allreduce benchmark's model and the fit's memory bus),
``simulator_floor`` (the simulator's floor), ``glove_report`` (GloVe's rows),
``english_corpus`` (GloVe's offline corpus).
"""
