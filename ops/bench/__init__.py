"""The benchmarks: each ``*_bench.py`` is a command (its docstring says what it prints).

The worker bench is a package of its own parts: :mod:`ops.bench.measure` (timing loops,
percentiles, CPU accounting, the met / not met table, the baseline checkout), shared with
the other benches; :mod:`ops.bench.backlog` (the contract and results it runs on);
:mod:`ops.bench.harness` (one run: topics, processes, the backlog and latency cases);
one module per variant (:mod:`ops.bench.peer`, :mod:`ops.bench.copier`,
:mod:`ops.bench.relay`, :mod:`ops.bench.worker`, :mod:`ops.bench.floor`); and
:mod:`ops.bench.summary` (medians, targets, the printed report).
"""
