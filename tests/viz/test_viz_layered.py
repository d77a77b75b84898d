"""Our layered layout (no Graphviz): boxes never overlap, edges run downwards through their waypoints,
cycles (TF's while loops) are laid out, and the clustering picture's boxes are apart on real graphs."""
from __future__ import annotations

import configparser
import fnmatch
import itertools
import random
from pathlib import Path

import pytest

from tfxla_cluster.viz.graph_dot import make_plan
from tfxla_cluster.viz.layered import layered_layout
from tfxla_cluster.viz.model import build_model
from tfxla_cluster.viz.scene import ClusterBox, build_scene

ROOT = Path(__file__).resolve().parents[2]


def rects(layout, sizes):
    return {k: (x - sizes[k][0] / 2, y - sizes[k][1] / 2, x + sizes[k][0] / 2, y + sizes[k][1] / 2)
            for k, (x, y) in layout.pos.items()}


def overlap(a, b, gap=0.0):
    return a[0] < b[2] + gap and b[0] < a[2] + gap and a[1] < b[3] + gap and b[1] < a[3] + gap


def random_dag(n, seed):
    rng = random.Random(seed)
    edges = [(rng.randrange(max(0, v - 12), v), v) for v in range(1, n) for _ in range(rng.randint(1, 2))]
    sizes = {v: (rng.choice([30.0, 80.0, 150.0]), rng.choice([20.0, 32.0, 60.0])) for v in range(n)}
    return list(range(n)), sizes, edges


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_boxes_are_apart_and_edges_run_down(seed):
    keys, sizes, edges = random_dag(120, seed)
    layout = layered_layout(keys, sizes, edges, node_sep=10, rank_sep=30)
    r = rects(layout, sizes)
    for a, b in itertools.combinations(keys, 2):
        assert not overlap(r[a], r[b], gap=-1e-6), (a, b, r[a], r[b])
    assert all(-1e-6 <= r[k][0] and r[k][2] <= layout.width + 1e-6 and -1e-6 <= r[k][1] and r[k][3] <= layout.height + 1e-6
               for k in keys)
    assert len(layout.routes) == len(edges)
    for (u, v), route in zip(edges, layout.routes):
        ys = [layout.pos[u][1], *(y for _, y in route), layout.pos[v][1]]
        assert ys == sorted(ys) and ys[0] < ys[-1]           # a DAG's edges all point down
        for x, y in route:                                   # waypoints run between boxes, not through them
            assert not any(overlap(r[k], (x - 2, y, x + 2, y)) for k in keys)
    assert layered_layout(keys, sizes, edges, node_sep=10, rank_sep=30) == layout   # deterministic


def test_cycles_self_loops_and_parallel_edges():
    keys = ["a", "b", "c", "d"]
    sizes = {k: (40.0, 20.0) for k in keys}
    edges = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "d"), ("a", "b"), ("b", "d")]
    layout = layered_layout(keys, sizes, edges)
    assert set(layout.pos) == set(keys) and len(layout.routes) == len(edges)
    assert layout.routes[4] == []                            # the self-loop
    assert layout.routes[0] == layout.routes[5]              # parallel edges share a route
    r = rects(layout, sizes)
    assert not any(overlap(r[a], r[b]) for a, b in itertools.combinations(keys, 2))


def test_many_sources_are_stacked_not_one_long_row():
    keys = ["sink"] + [f"arg{i}" for i in range(40)]
    sizes = {k: (60.0, 20.0) for k in keys}
    layout = layered_layout(keys, sizes, [(f"arg{i}", "sink") for i in range(40)])
    assert layout.width < 40 * (60 + 14) / 2 and layout.layers > 3   # one row would be 40 boxes wide
    assert all(layout.pos[f"arg{i}"][1] < layout.pos["sink"][1] for i in range(40))


@pytest.mark.parametrize("name, collapse", [("transformer_block", False), ("transformer_block", True),
                                            ("while_loop", False), ("variables", False)])
def test_picture_boxes_are_apart(name, collapse):
    import tfxla_cluster as txc

    flags = txc.Flags.parse("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit")
    result = txc.mark_for_compilation(txc.load_graph(str(ROOT / "graphs" / f"{name}.pbtxt"), grappler=True), flags,
                                      state=txc.ProcessState())
    scene = build_scene(make_plan(build_model(result, flags), collapse=collapse))
    top = {}
    for key, item in scene.items.items():
        w, h = item.size if isinstance(item, ClusterBox) else (item.w, item.h)
        top[key] = (item.x - w / 2, item.y - h / 2, item.x + w / 2, item.y + h / 2)
    assert not [(a, b) for a, b in itertools.combinations(top, 2) if overlap(top[a], top[b])]
    # Every op node is drawn once: at the top level or inside its cluster's box, which holds it.
    drawn = [k[2:] for k in top if k.startswith("n:")]
    for cb in scene.clusters.values():
        w, h = cb.expanded
        for b in cb.members:
            assert 0 <= b.x - b.w / 2 and b.x + b.w / 2 <= w + 1e-6 and 0 <= b.y - b.h / 2 and b.y + b.h / 2 <= h + 1e-6
        drawn += [b.node.name for b in cb.members]
    assert sorted(drawn) == sorted(result.decisions)


def test_page_assets_are_package_data():
    """The page's script and style are read from the package: setup.cfg must ship them in a wheel."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    data = cfg["options.package_data"]
    assets = sorted((ROOT / "tfxla_cluster" / "viz" / "assets").iterdir())
    assert assets
    for path in assets:
        # a pattern of package tfxla_cluster.viz, or of tfxla_cluster itself (``**/`` matches any folder)
        shipped = [(pkg, p.strip()) for pkg in ("tfxla_cluster.viz", "tfxla_cluster") if pkg in data
                   for p in data[pkg].split(",")]
        assert any(fnmatch.fnmatch(path.relative_to(ROOT / pkg.replace(".", "/")).as_posix(), pat)
                   for pkg, pat in shipped), path
