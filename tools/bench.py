"""``python tools/bench.py [--quick] [--only A,B] [--json PATH]`` — same as ``tfxla-cluster bench``
(the benchmark lives in :mod:`tfxla_cluster.bench` so the installed CLI has it)."""
import sys

from tfxla_cluster.bench import main

if __name__ == "__main__":
    sys.exit(main())
