"""The suites of bench/run.py, one module each. A suite names the engines it may run
(``CHOICES``; ``ENGINES`` by default; ``ALWAYS`` the bounds it runs besides), its default stores
(``STORES``, None for a suite without any) and rounds (``REPS``), what ``--quick`` changes
(``QUICK``), and has:

- ``add_args(ap)`` and ``check(args, error)``: its own options;
- ``commands(args, ctx, store, url)``: {row engine name: argv} for one store (pure: the unit
  test checks them);
- ``run(session)``: the rounds, each run through ``session.measure`` and kept with
  ``session.keep`` (bench/run.py's Session); returns the rows;
- ``config(args)``: the report's config line; ``markdown(meta, rows)``: the report (pure).
"""
from . import cache, cloud, faults, local, objects, patches, python, ranks, references, slow_loop, workers

SUITES = {m.NAME: m for m in (local, python, cloud, patches, ranks, cache, objects, references, slow_loop, workers,
                                faults)}
