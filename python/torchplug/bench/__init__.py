"""torchplug's benchmark: each op side by side with what a user would call instead.

Run it as a program (docs/benchmarks.md has the details)::

    python -m torchplug.bench                      # GPU sizes on cuda, else the CPU set
    python -m torchplug.bench --quick --device cpu # under a minute on 2 cores

Each op family's workloads (sizes, inputs and the candidates: torchplug and
the baselines) live in its folder, ``ops/<family>/*_bench.py``, installed as
``torchplug.ops.<family>``. Modules here: ``workloads`` (what a workload is,
the profiles), ``candidates`` (what the families' lineups share), ``timing``
(timers, peak memory, copy bandwidth), ``measure`` (correctness guard and
timing of one workload), ``report`` (table, JSON, plot), and ``compare``, side
by side timing of any calls (a plugin's op against plain PyTorch, say).
"""

from .compare import Comparison, compare  # noqa: E402

__all__ = ["Comparison", "compare"]
