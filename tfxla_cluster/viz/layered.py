"""A layered (Sugiyama-style) graph layout in pure Python: boxes in, centres and edge waypoints out.

Stage: visualization (layout). This is what places the clustering pictures (``.svg`` and the HTML
page) without Graphviz. The steps are the classic ones, each chosen to stay near-linear so that a
few thousand boxes (plus the dummy points of long edges) lay out in about a second:

1. cycle breaking — edges that close a cycle in a depth-first search (TF's while loops) are reversed
   for layering and drawn back the other way;
2. layering — longest path from the sources, then every source (constants, variables, placeholders)
   moved down next to its first consumer, so it does not sit in the top row far from where it is used;
   many sources above one row are stacked in rows of about sqrt(n), so the picture does not become a
   thin strip;
3. dummy points on edges that span several layers, so long edges are routed between the boxes (up
   to a budget of points proportional to the boxes, given to the shortest edges first; the longest
   edges beyond it are drawn as one curve, which keeps big training steps fast and small);
4. ordering within layers — barycentre sweeps down and up (a few rounds) from depth-first order;
5. x coordinates — each layer is placed as close as possible (least squares) to the mean of its
   neighbours' x under the minimum-gap constraints, by pool-adjacent-violators, alternating down and
   up; y coordinates — layers stacked by their tallest box.

Guarantees: deterministic for the same input; boxes in one layer never overlap (gap ``node_sep``);
layers are ``rank_sep`` apart; every edge of the input gets a waypoint list (possibly empty) that runs
from its source towards its target, vertically through each layer's band (curves bend between bands).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Sequence

DUMMY_WIDTH = 6.0
DUMMY_BUDGET_PER_NODE, DUMMY_BUDGET = 3, 2000   # dummy points per layout: 3 per box + 2000


@dataclass
class Layout:
    """Result of :func:`layered_layout`: ``pos[key]`` is a box's centre; ``routes[k]`` the waypoints of
    input edge ``k`` (source side first); ``width``/``height`` the bounding box (origin 0, 0)."""

    pos: dict[Hashable, tuple[float, float]]
    routes: list[list[tuple[float, float]]]
    width: float
    height: float
    layers: int


def layered_layout(keys: Sequence[Hashable], sizes: dict[Hashable, tuple[float, float]],
                   edges: Sequence[tuple[Hashable, Hashable]], *, node_sep: float = 14.0,
                   rank_sep: float = 34.0, rounds: int = 4) -> Layout:
    """Lay out boxes ``keys`` (``sizes[key]`` = width, height) joined by directed ``edges``."""
    n = len(keys)
    if n == 0:
        return Layout({}, [[] for _ in edges], 0.0, 0.0, 0)
    index = {k: i for i, k in enumerate(keys)}
    # One layout edge per ordered pair; self-loops and parallel edges are not laid out separately.
    pair_of_edge: list[tuple[int, int] | None] = []
    pairs: dict[tuple[int, int], None] = {}
    for a, b in edges:
        i, j = index[a], index[b]
        if i == j:
            pair_of_edge.append(None)
            continue
        pair_of_edge.append((i, j))
        pairs[(i, j)] = None
    reversed_pairs = _back_edges(n, list(pairs))
    succ: list[list[int]] = [[] for _ in range(n)]
    pred: list[list[int]] = [[] for _ in range(n)]
    dag_edges: dict[tuple[int, int], None] = {}
    for (i, j) in pairs:
        u, v = (j, i) if (i, j) in reversed_pairs else (i, j)
        if (u, v) not in dag_edges:
            dag_edges[(u, v)] = None
            succ[u].append(v)
            pred[v].append(u)
    layer = _layers(n, succ, pred)

    # Dummy points: node ids n.. ; chain[(u, v)] = the ids from u to v inclusive.
    widths = [sizes[k][0] for k in keys]
    heights = [sizes[k][1] for k in keys]
    node_layer = list(layer)
    up: list[list[int]] = [[] for _ in range(n)]     # neighbours one layer above
    down: list[list[int]] = [[] for _ in range(n)]   # one layer below
    chains: dict[tuple[int, int], list[int]] = {}
    # Long edges get dummy points, shortest first, up to a budget; beyond it (a training step's
    # forward-to-backward edges span hundreds of layers) an edge is drawn directly.
    budget = DUMMY_BUDGET_PER_NODE * n + DUMMY_BUDGET
    for (u, v) in sorted(dag_edges, key=lambda e: layer[e[1]] - layer[e[0]]):
        span = layer[v] - layer[u] - 1
        chain = [u]
        if span <= budget:
            budget -= span
            for lay in range(layer[u] + 1, layer[v]):
                d = len(node_layer)
                node_layer.append(lay)
                widths.append(DUMMY_WIDTH)
                heights.append(0.0)
                up.append([])
                down.append([])
                chain.append(d)
        chain.append(v)
        for a, b in zip(chain, chain[1:]):
            down[a].append(b)
            up[b].append(a)
        chains[(u, v)] = chain
    total = len(node_layer)
    n_layers = max(node_layer) + 1
    rows = _initial_order(n, total, node_layer, n_layers, succ, down)
    rows = _order(rows, up, down, rounds)
    xs = _x_coordinates(rows, widths, up, down, node_sep, rounds, n)
    # y: layers stacked by their tallest box.
    layer_h = [0.0] * n_layers
    for v in range(total):
        layer_h[node_layer[v]] = max(layer_h[node_layer[v]], heights[v])
    layer_y = []
    y = 0.0
    for h in layer_h:
        layer_y.append(y + h / 2)
        y += h + rank_sep
    height = y - rank_sep if n_layers else 0.0
    left = min(xs[v] - widths[v] / 2 for v in range(total))
    right = max(xs[v] + widths[v] / 2 for v in range(total))
    pos = {keys[i]: (xs[i] - left, layer_y[node_layer[i]]) for i in range(n)}

    def band(v: int) -> tuple[float, float]:
        lay = node_layer[v]
        return layer_y[lay] - layer_h[lay] / 2, layer_y[lay] + layer_h[lay] / 2

    def route(u: int, v: int) -> list[tuple[float, float]]:
        # Vertical through every layer band (a dummy's point becomes the band's top and bottom), so the
        # curves between layers bend only in the gaps, never across a tall box beside the edge.
        pts = []
        if layer_y[node_layer[u]] + heights[u] / 2 < band(u)[1] - 0.5:
            pts.append((xs[u] - left, band(u)[1]))
        for d in chains[(u, v)][1:-1]:
            top, bottom = band(d)
            pts.append((xs[d] - left, top))
            if bottom > top:
                pts.append((xs[d] - left, bottom))
        if layer_y[node_layer[v]] - heights[v] / 2 > band(v)[0] + 0.5:
            pts.append((xs[v] - left, band(v)[0]))
        return pts

    routes: list[list[tuple[float, float]]] = []
    for pair in pair_of_edge:
        if pair is None:
            routes.append([])
        elif pair in reversed_pairs:
            routes.append(list(reversed(route(pair[1], pair[0]))))
        else:
            routes.append(route(*pair))
    return Layout(pos, routes, right - left, height, n_layers)


def _back_edges(n: int, pairs: list[tuple[int, int]]) -> set[tuple[int, int]]:
    """Edges that close a cycle in an iterative depth-first search (node order)."""
    out: list[list[int]] = [[] for _ in range(n)]
    for i, j in pairs:
        out[i].append(j)
    state = [0] * n   # 0 new, 1 on the stack, 2 done
    back: set[tuple[int, int]] = set()
    for root in range(n):
        if state[root]:
            continue
        stack = [(root, 0)]
        state[root] = 1
        while stack:
            v, k = stack[-1]
            if k < len(out[v]):
                stack[-1] = (v, k + 1)
                w = out[v][k]
                if state[w] == 1:
                    back.add((v, w))
                elif state[w] == 0:
                    state[w] = 1
                    stack.append((w, 0))
            else:
                state[v] = 2
                stack.pop()
    return back


def _layers(n: int, succ: list[list[int]], pred: list[list[int]]) -> list[int]:
    """Longest-path layers; sources moved down to just above their nearest consumer."""
    indeg = [len(p) for p in pred]
    ready = [v for v in range(n) if indeg[v] == 0]
    order = []
    while ready:
        v = ready.pop()
        order.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    layer = [0] * n
    for v in order:
        for w in succ[v]:
            if layer[w] < layer[v] + 1:
                layer[w] = layer[v] + 1
    sources: dict[int, list[int]] = {}
    for v in range(n):
        if not pred[v] and succ[v]:
            layer[v] = min(layer[w] for w in succ[v]) - 1
            sources.setdefault(layer[v], []).append(v)
    # A row of many sources (a function's arguments) would make the picture a thin strip: stack
    # them in rows of at most ``cap`` above their consumers.
    cap = max(6, math.isqrt(n) + 1)
    for lay, vs in sources.items():
        for k, v in enumerate(vs):
            layer[v] = lay - k // cap
    base = min(layer)
    return [lay - base for lay in layer]


def _initial_order(n: int, total: int, node_layer: list[int], n_layers: int, succ: list[list[int]],
                   down: list[list[int]]) -> list[list[int]]:
    """Rows in depth-first order from the sources (keeps chains of ops together)."""
    rows: list[list[int]] = [[] for _ in range(n_layers)]
    seen = [False] * total
    for root in range(n):
        if seen[root]:
            continue
        stack = [root]
        while stack:
            v = stack.pop()
            if seen[v]:
                continue
            seen[v] = True
            rows[node_layer[v]].append(v)
            stack.extend(reversed(down[v]))
    return rows


def _order(rows: list[list[int]], up: list[list[int]], down: list[list[int]], rounds: int) -> list[list[int]]:
    """Barycentre sweeps: each row sorted by the mean position of its neighbours in the row before."""
    pos: dict[int, float] = {}
    for row in rows:
        for k, v in enumerate(row):
            pos[v] = float(k)
    sweeps = [(range(1, len(rows)), up), (range(len(rows) - 2, -1, -1), down)] * rounds
    for layer_range, nbrs in sweeps:
        for lay in layer_range:
            row = rows[lay]
            keyed = []
            for k, v in enumerate(row):
                ns = nbrs[v]
                if ns:
                    keyed.append((sum(pos[u] for u in ns) / len(ns), k, v))
                else:
                    keyed.append((float(k), k, v))
            keyed.sort()
            row = [v for _, _, v in keyed]
            rows[lay] = row
            for k, v in enumerate(row):
                pos[v] = float(k)
    return rows


def _x_coordinates(rows: list[list[int]], widths: list[float], up: list[list[int]], down: list[list[int]],
                   sep: float, rounds: int, n_real: int) -> list[float]:
    """x of every box and dummy point; ids from ``n_real`` on are dummies, which may run closer together
    (parallel long edges) than boxes."""
    def gap(a: int, b: int) -> float:
        return sep if a < n_real or b < n_real else sep / 4

    xs = [0.0] * len(widths)
    for row in rows:
        x = 0.0
        for k, v in enumerate(row):
            if k:
                x += gap(row[k - 1], v)
            xs[v] = x + widths[v] / 2
            x += widths[v]
    # Start centred on the widest row.
    widest = max(((xs[row[-1]] + widths[row[-1]] / 2) if row else 0.0, k) for k, row in enumerate(rows))
    for k, row in enumerate(rows):
        if k == widest[1] or not row:
            continue
        span = xs[row[-1]] + widths[row[-1]] / 2
        shift = (widest[0] - span) / 2
        for v in row:
            xs[v] += shift
    plan = [(range(1, len(rows)), (up,)), (range(len(rows) - 2, -1, -1), (down,))] * rounds
    plan.append((range(len(rows)), (up, down)))
    for layer_range, sides in plan:
        for lay in layer_range:
            row = rows[lay]
            if not row:
                continue
            want = []
            for v in row:
                total, count = 0.0, 0
                for nbrs in sides:
                    for u in nbrs[v]:
                        total += xs[u]
                        count += 1
                want.append(total / count if count else xs[v])
            for v, x in zip(row, _place_row(row, want, widths, gap)):
                xs[v] = x
    return xs


def _place_row(row: list[int], want: list[float], widths: list[float], gap) -> list[float]:
    """Centres closest (least squares) to ``want`` keeping the row's order and gaps: with
    ``y_k = x_k - offset_k`` (offset = the minimum distance from the first centre) the gaps become
    ``y`` non-decreasing, an isotonic regression solved by pool-adjacent-violators."""
    offsets = []
    off = 0.0
    for k, v in enumerate(row):
        if k:
            off += widths[row[k - 1]] / 2 + gap(row[k - 1], v) + widths[v] / 2
        offsets.append(off)
    targets = [w - o for w, o in zip(want, offsets)]
    blocks: list[list[float]] = []   # [mean, count]
    for t in targets:
        blocks.append([t, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, c2 = blocks.pop()
            m1, c1 = blocks[-1]
            blocks[-1] = [(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2]
    ys: list[float] = []
    for m, c in blocks:
        ys.extend([m] * int(c))
    return [y + o for y, o in zip(ys, offsets)]
