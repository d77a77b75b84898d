"""``python -m tfxla_cluster`` is the ``tfxla-cluster`` CLI."""
import sys

from tfxla_cluster.cli import main

sys.exit(main())
