"""Incremental cycle detection for clustering: XLA's ``GraphCycles``, node for node.

Stage: the cycle-detection graph that ``MarkForCompilationPass`` builds once
(``CreateCycleDetectionGraph``) and then shrinks edge by edge while it merges
clusters (``RunEdgeContractionLoop``).

Guarantee: every observable order matches ``xla/service/graphcycles/graphcycles.cc``
and ``ordered_set.h``. Clustering results depend on these orders, so they are
reproduced exactly, not just "some valid topological order":

* Ranks follow Pearce-Kelly. ``new_node`` gives a fresh id its own index as its
  rank. A reused id keeps the rank it had when it was freed, so the ranks in
  use always form a permutation of ``0..num_slots-1``.
* Freed ids go on a stack. ``new_node`` pops the most recently freed id (LIFO)
  and only grows the table when that stack is empty.
* Successor and predecessor lists are ``OrderedSet`` sequences: they keep
  insertion order, and erasing an element moves the last element into the hole.
* When ``insert_edge(x, y)`` must reorder (``rank[x] > rank[y]``), it takes the
  nodes found by a backward DFS from x (sorted by old rank) followed by the
  nodes found by a forward DFS from y (sorted by old rank), and gives them the
  union of their old ranks in ascending order.
* ``contract_edge(a, b)`` removes a->b. If b is still reachable, it re-appends
  the edge (so the edge moves to the end of both lists) and fails. Otherwise the
  endpoint with the larger in+out degree survives (``a`` wins ties). The loser's
  id is freed, then its out-edges are re-inserted in order, then its in-edges.
* ``all_nodes_in_post_order`` lists the live nodes by descending rank.

Pure Python. Each node's sets live unwrapped in flat per-id tables. Per call, the
hot paths (``insert_edge`` and the rank-bounded DFS) allocate only a DFS stack,
plus the reorder lists when a reorder happens. Building a graph with 100k nodes
and 300k mostly-forward edges takes well under a second.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["OrderedSet", "GraphCycles", "describe_cycle"]


def _erase(seq: list[int], pos: dict[int, int], value: int) -> None:
    """OrderedSet::Erase: drop ``value`` (must be present); the last element fills its slot."""
    i = pos.pop(value)
    last = seq.pop()
    if i < len(seq):
        seq[i] = last
        pos[last] = i


class OrderedSet:
    """XLA's ``OrderedSet<int32_t>``: a set whose iteration order depends only on
    the sequence of inserts and erases.

    ``erase`` moves the last element into the freed slot, so removal is O(1).
    Like XLA, it does not preserve the relative order of the remaining elements.
    """

    __slots__ = ("seq", "pos")

    def __init__(self) -> None:
        self.seq: list[int] = []       # the iteration order
        self.pos: dict[int, int] = {}  # value -> index in seq

    def insert(self, value: int) -> bool:
        """Appends ``value``. Returns False if it was already present."""
        pos = self.pos
        if value in pos:
            return False
        pos[value] = len(self.seq)
        self.seq.append(value)
        return True

    def erase(self, value: int) -> None:
        """Removes ``value``, which must be present; the last element fills the hole."""
        _erase(self.seq, self.pos, value)

    def clear(self) -> None:
        self.seq.clear()
        self.pos.clear()

    def __contains__(self, value: int) -> bool:
        return value in self.pos

    def __len__(self) -> int:
        return len(self.seq)

    def __iter__(self):
        return iter(self.seq)

    def sequence(self) -> list[int]:
        """The live sequence. Do not mutate it."""
        return self.seq

    def __repr__(self) -> str:
        return f"OrderedSet({self.seq!r})"


class GraphCycles:
    """A DAG that refuses edges which would close a cycle (Pearce-Kelly ranks).

    Node ids are small ints from ``new_node()``. Any id passed to another method
    must be live, i.e. allocated and not removed. As in XLA, this is not checked
    on the hot paths.

    Each node's in- and out-sets are OrderedSets, stored unwrapped as a sequence
    list plus a position dict in parallel per-id tables. This saves two objects per
    node, and with them most of the garbage collector's work on large graphs.
    """

    __slots__ = ("_rank", "_visited", "_in_seq", "_in_pos", "_out_seq", "_out_pos",
                 "_data", "_free", "_live", "_deltaf", "_deltab")

    def __init__(self) -> None:
        self._rank: list[int] = []                 # Pearce-Kelly rank per id
        self._visited: list[bool] = []             # DFS marker, always False between calls
        self._in_seq: list[list[int]] = []         # predecessors per id, in order
        self._in_pos: list[dict[int, int]] = []    # predecessor -> index in _in_seq[id]
        self._out_seq: list[list[int]] = []        # successors per id, in order
        self._out_pos: list[dict[int, int]] = []   # successor -> index in _out_seq[id]
        self._data: list[object] = []              # user data (XLA's node data)
        self._free: list[int] = []                 # freed ids, reused LIFO
        self._live: bytearray = bytearray()        # 1 if id is allocated
        self._deltaf: list[int] = []               # nodes reached by the last forward DFS
        self._deltab: list[int] = []               # nodes reached by the last backward DFS

    # -- nodes -------------------------------------------------------------

    def new_node(self) -> int:
        """Returns an unused id: the most recently freed one, else a fresh one."""
        if self._free:
            # The reused id keeps its old rank, which keeps ranks a permutation.
            node = self._free.pop()
            self._data[node] = None
            self._live[node] = 1
            return node
        node = len(self._rank)
        self._rank.append(node)
        self._visited.append(False)
        self._in_seq.append([])
        self._in_pos.append({})
        self._out_seq.append([])
        self._out_pos.append({})
        self._data.append(None)
        self._live.append(1)
        return node

    def new_nodes(self, count: int) -> None:
        """``count`` calls of ``new_node()`` on a graph with no freed ids (ids len..len+count-1)."""
        if self._free:
            raise ValueError("new_nodes: only for a graph with no freed ids")
        start = len(self._rank)
        self._rank.extend(range(start, start + count))
        self._visited.extend([False] * count)
        self._in_seq.extend([] for _ in range(count))
        self._in_pos.extend({} for _ in range(count))
        self._out_seq.extend([] for _ in range(count))
        self._out_pos.extend({} for _ in range(count))
        self._data.extend([None] * count)
        self._live.extend(b"\x01" * count)

    def remove_node(self, node: int) -> None:
        """Deletes ``node`` and all its edges. Its id becomes reusable."""
        if not self.is_live(node):
            raise ValueError(f"remove_node: {node} is not a live node")
        in_seq, in_pos = self._in_seq, self._in_pos
        out_seq, out_pos = self._out_seq, self._out_pos
        for y in out_seq[node]:
            _erase(in_seq[y], in_pos[y], node)
        for y in in_seq[node]:
            _erase(out_seq[y], out_pos[y], node)
        in_seq[node].clear()
        in_pos[node].clear()
        out_seq[node].clear()
        out_pos[node].clear()
        self._free.append(node)
        self._live[node] = 0

    def is_live(self, node: int) -> bool:
        return 0 <= node < len(self._live) and bool(self._live[node])

    def num_node_slots(self) -> int:
        """Number of ids ever allocated (live plus freed)."""
        return len(self._rank)

    def get_node_data(self, node: int) -> object:
        return self._data[node]

    def set_node_data(self, node: int, data: object) -> None:
        self._data[node] = data

    def rank(self, node: int) -> int:
        """The node's current Pearce-Kelly rank (exposed for tests and dumps)."""
        return self._rank[node]

    def ranks(self) -> list[int]:
        """The live rank table, by id (for hot loops that read many ranks). Do not mutate."""
        return self._rank

    # -- edges -------------------------------------------------------------

    def has_edge(self, x: int, y: int) -> bool:
        return y in self._out_pos[x]

    def remove_edge(self, x: int, y: int) -> None:
        """Removes x->y if present. The ranks stay valid, so nothing is reordered."""
        opos = self._out_pos[x]
        if y not in opos:
            return
        _erase(self._out_seq[x], opos, y)
        _erase(self._in_seq[y], self._in_pos[y], x)

    def insert_edge(self, x: int, y: int) -> bool:
        """Adds x->y. Returns False, and changes nothing, if that would make a cycle.

        Inserting an edge that already exists returns True and changes nothing.
        """
        if x == y:
            return False
        opos = self._out_pos[x]
        if y in opos:
            return True
        # Append to both sets first (as XLA does); a cycle rollback then pops them.
        oseq = self._out_seq[x]
        opos[y] = len(oseq)
        oseq.append(y)
        iseq = self._in_seq[y]
        ipos = self._in_pos[y]
        ipos[x] = len(iseq)
        iseq.append(x)

        rank = self._rank
        rx = rank[x]
        ry = rank[y]
        if rx <= ry:
            return True
        # Only nodes with ranks in [ry, rx] can need new ranks.
        if not self._forward_dfs(y, rx):
            _erase(oseq, opos, y)
            _erase(iseq, ipos, x)
            self._clear_visited(self._deltaf)
            return False
        self._backward_dfs(x, ry)
        self._reorder()
        return True

    def insert_edges(self, edges: Sequence[tuple[int, int]]) -> int:
        """``insert_edge`` for each ``(x, y)`` in order, up to the first that would close a cycle:
        returns its index (that edge is not inserted, the ones after it are not tried), or -1.

        Building a graph inserts every edge once, and most go forward in rank: those are appended
        here exactly as ``insert_edge`` does, without a call per edge."""
        rank = self._rank
        out_seq, out_pos, in_seq, in_pos = self._out_seq, self._out_pos, self._in_seq, self._in_pos
        insert_edge = self.insert_edge
        for i, (x, y) in enumerate(edges):
            opos = out_pos[x]
            if y in opos:   # present already (never a self-loop: those are refused)
                continue
            if rank[x] < rank[y]:
                oseq = out_seq[x]
                opos[y] = len(oseq)
                oseq.append(y)
                iseq = in_seq[y]
                in_pos[y][x] = len(iseq)
                iseq.append(x)
            elif not insert_edge(x, y):
                return i
        return -1

    def _forward_dfs(self, n: int, upper_bound: int) -> bool:
        """DFS along out-edges over ranks < upper_bound. Returns False if it reaches the
        node whose rank is upper_bound (a cycle). Leaves the visited nodes in _deltaf,
        still marked."""
        rank = self._rank
        visited = self._visited
        out_seq = self._out_seq
        deltaf = self._deltaf
        deltaf.clear()
        stack = [n]
        pop = stack.pop
        push = stack.append
        while stack:
            n = pop()
            if visited[n]:
                continue
            visited[n] = True
            deltaf.append(n)
            for w in out_seq[n]:
                rw = rank[w]
                if rw == upper_bound:
                    return False
                if rw < upper_bound and not visited[w]:
                    push(w)
        return True

    def _backward_dfs(self, n: int, lower_bound: int) -> None:
        """DFS along in-edges over ranks > lower_bound; fills _deltab (still marked)."""
        rank = self._rank
        visited = self._visited
        in_seq = self._in_seq
        deltab = self._deltab
        deltab.clear()
        stack = [n]
        pop = stack.pop
        push = stack.append
        while stack:
            n = pop()
            if visited[n]:
                continue
            visited[n] = True
            deltab.append(n)
            for w in in_seq[n]:
                if lower_bound < rank[w] and not visited[w]:
                    push(w)

    def _reorder(self) -> None:
        """Gives the backward set, then the forward set (each in old-rank order), the
        sorted union of their old ranks."""
        rank = self._rank
        visited = self._visited
        key = rank.__getitem__
        deltab = self._deltab
        deltaf = self._deltaf
        deltab.sort(key=key)
        deltaf.sort(key=key)
        nodes = deltab + deltaf
        # Ranks are unique, so sorting the concatenation equals std::merge.
        merged = sorted([rank[w] for w in nodes])
        for w, r in zip(nodes, merged):
            rank[w] = r
            visited[w] = False

    def _clear_visited(self, nodes: list[int]) -> None:
        visited = self._visited
        for w in nodes:
            visited[w] = False

    # -- queries -----------------------------------------------------------

    def find_path(self, x: int, y: int) -> list[int]:
        """XLA's ``FindPath(x, y)``: the DFS path from x to y (both included), or [].

        The node order is XLA's. Its ``max_path_len`` only truncates the stored path,
        so callers slice the list themselves; ``len()`` is XLA's return value.
        """
        out_seq = self._out_seq
        path: list[int] = []
        seen: set[int] = set()
        stack = [x]
        while stack:
            n = stack.pop()
            if n < 0:  # marker: leaving a node
                path.pop()
                continue
            path.append(n)
            stack.append(-1)
            if n == y:
                return path
            for w in out_seq[n]:
                if w not in seen:
                    seen.add(w)
                    stack.append(w)
        return []

    def is_reachable(self, x: int, y: int) -> bool:
        """True if y can be reached from x, counting x from itself."""
        return bool(self.find_path(x, y))

    def is_reachable_non_const(self, x: int, y: int) -> bool:
        """Same answer as ``is_reachable``, but the search is bounded by y's rank."""
        if x == y:
            return True
        rank = self._rank
        ry = rank[y]
        if rank[x] >= ry:
            return False
        reachable = not self._forward_dfs(x, ry)
        self._clear_visited(self._deltaf)
        return reachable

    def can_contract_edge(self, a: int, b: int) -> bool:
        """True if a->b can be contracted without a cycle.

        As in XLA, the probe removes and re-inserts a->b, which moves that edge to the
        end of a's successors and b's predecessors.
        """
        if not self.has_edge(a, b):
            raise ValueError(f"No edge exists from {a} to {b}")
        self.remove_edge(a, b)
        reachable = self.is_reachable_non_const(a, b)
        self.insert_edge(a, b)
        return not reachable

    def contract_edge(self, a: int, b: int) -> int | None:
        """Merges a and b along a->b. Returns the surviving id, or None if the merge
        would make a cycle (the graph is then unchanged, except that a->b moves to the
        end of both lists)."""
        in_seq, in_pos = self._in_seq, self._in_pos
        out_seq, out_pos = self._out_seq, self._out_pos
        if b not in out_pos[a]:
            raise ValueError(f"No edge exists from {a} to {b}")
        # remove_edge(a, b): _erase twice, inlined (once per contraction attempt).
        seq, pos = out_seq[a], out_pos[a]
        i = pos.pop(b)
        last = seq.pop()
        if i < len(seq):
            seq[i] = last
            pos[last] = i
        seq, pos = in_seq[b], in_pos[b]
        i = pos.pop(a)
        last = seq.pop()
        if i < len(seq):
            seq[i] = last
            pos[last] = i
        # is_reachable_non_const(a, b), inlined (a != b here): asked once per contraction.
        rank = self._rank
        if rank[a] < rank[b]:
            reachable = not self._forward_dfs(a, rank[b])
            visited = self._visited
            for w in self._deltaf:   # _clear_visited, inlined
                visited[w] = False
            if reachable:
                self.insert_edge(a, b)
                return None

        # Keep the node with more edges, so fewer edges get re-inserted.
        if len(in_seq[b]) + len(out_seq[b]) > len(in_seq[a]) + len(out_seq[a]):
            a, b = b, a

        # Detach b's sets (XLA moves them out, leaving b empty).
        b_out = out_seq[b]
        b_in = in_seq[b]
        out_seq[b] = []
        out_pos[b] = {}
        in_seq[b] = []
        in_pos[b] = {}
        # _erase, inlined: every contraction detaches all of b's edges.
        for y in b_out:
            seq, pos = in_seq[y], in_pos[y]
            i = pos.pop(b)
            last = seq.pop()
            if i < len(seq):
                seq[i] = last
                pos[last] = i
        for y in b_in:
            seq, pos = out_seq[y], out_pos[y]
            i = pos.pop(b)
            last = seq.pop()
            if i < len(seq):
                seq[i] = last
                pos[last] = i
        self._free.append(b)
        self._live[b] = 0

        # Re-insert b's edges on a. Most are already present or rank-forward; those are done here
        # exactly as insert_edge does them, and only a backward edge calls it (it may reorder ranks).
        insert_edge = self.insert_edge
        a_oseq, a_opos = out_seq[a], out_pos[a]
        for y in b_out:
            if y == a or y in a_opos:
                continue
            if rank[a] <= rank[y]:
                a_opos[y] = len(a_oseq)
                a_oseq.append(y)
                iseq = in_seq[y]
                in_pos[y][a] = len(iseq)
                iseq.append(a)
            else:
                insert_edge(a, y)
        a_iseq, a_ipos = in_seq[a], in_pos[a]
        for y in b_in:
            if y == a or a in out_pos[y]:
                continue
            if rank[y] <= rank[a]:
                oseq = out_seq[y]
                out_pos[y][a] = len(oseq)
                oseq.append(a)
                a_ipos[y] = len(a_iseq)
                a_iseq.append(y)
            else:
                insert_edge(y, a)
        return a

    def successors(self, node: int) -> list[int]:
        """The live successor sequence. Do not mutate; copy before changing the graph."""
        return self._out_seq[node]

    def predecessors(self, node: int) -> list[int]:
        """The live predecessor sequence. Do not mutate; copy before changing the graph."""
        return self._in_seq[node]

    def successors_copy(self, node: int) -> list[int]:
        return list(self._out_seq[node])

    def predecessors_copy(self, node: int) -> list[int]:
        return list(self._in_seq[node])

    def all_nodes_in_post_order(self) -> list[int]:
        """Live nodes by descending rank: if x reaches y, y comes before x."""
        by_rank = [0] * len(self._rank)
        for node, r in enumerate(self._rank):
            by_rank[r] = node
        live = self._live
        return [node for node in reversed(by_rank) if live[node]]

    def debug_string(self) -> str:
        """XLA's ``DebugString``: the live edges in graphviz form, by source id."""
        parts = ["digraph {\n"]
        live = self._live
        for i, succs in enumerate(self._out_seq):
            if not live[i]:
                continue
            for succ in succs:
                parts.append(f'  "{i}" -> "{succ}"\n')
        parts.append("}\n")
        return "".join(parts)

    def check_invariants(self) -> bool:
        """XLA's ``CheckInvariants`` plus consistency checks on the adjacency sets.

        Raises AssertionError with XLA's wording on the first failure. Returns True
        otherwise. The cost is O(V + E).
        """
        seen_ranks: set[int] = set()
        rank = self._rank
        for x in range(len(rank)):
            if self._visited[x]:
                raise AssertionError(f"Did not clear visited marker on node {x}")
            rx = rank[x]
            if rx in seen_ranks:
                raise AssertionError(f"Duplicate occurrence of rank {rx}")
            seen_ranks.add(rx)
            for y in self._out_seq[x]:
                if rx >= rank[y]:
                    raise AssertionError(
                        f"Edge {x}->{y} has bad rank assignment {rx}->{rank[y]}")
        # Beyond XLA: each set's two halves agree, edges are mirrored, freed ids are bare.
        tables = ((self._out_seq, self._out_pos, self._in_pos, "out"),
                  (self._in_seq, self._in_pos, self._out_pos, "in"))
        for x in range(len(rank)):
            for seqs, poss, other_pos, kind in tables:
                seq, pos = seqs[x], poss[x]
                if len(seq) != len(pos) or any(pos.get(v) != i for i, v in enumerate(seq)):
                    raise AssertionError(f"Corrupt {kind}-set on node {x}")
                for y in seq:
                    if x not in other_pos[y]:
                        raise AssertionError(f"Unmirrored {kind}-edge at node {x} ({y})")
                    if not self._live[y] or not self._live[x]:
                        raise AssertionError(f"Edge between {x} and {y} touches a freed node")
        if sorted(seen_ranks) != list(range(len(rank))):
            raise AssertionError("Ranks are not a permutation of the node slots")
        return True


def describe_cycle(cycles: GraphCycles, node_name: Callable[[int], str | None],
                   src: int, dst: int, num_node_ids: int | None = None) -> str:
    """TF's ``DescribeCycle`` (xla_cluster_util.cc): why edge src->dst closes a cycle.

    The path runs from dst back to src, one line per node::

        Edge from c to a would create a cycle.
        +-> a
        |   b
        +-- c

    ``node_name(id)`` returns the TF node name, or None for ids that have no node
    (printed as "(null)", as in TF). When ``num_node_ids`` is given, TF's bounds are
    applied as well: ids outside ``[0, num_node_ids)``, such as frame nodes, print
    as "(null)". TF also keeps only the first ``num_node_ids + 1`` path entries and
    zero-fills the rest. Returns "" if dst does not reach src.
    """
    path: Sequence[int] = cycles.find_path(dst, src)
    if not path:
        return ""
    if num_node_ids is not None and len(path) > num_node_ids + 1:
        # TF's path buffer holds num_node_ids + 1 entries; resize() pads with 0.
        path = list(path[:num_node_ids + 1]) + [0] * (len(path) - num_node_ids - 1)

    def name(node_id: int) -> str:
        if num_node_ids is not None and not 0 <= node_id < num_node_ids:
            return "(null)"
        n = node_name(node_id)
        return "(null)" if n is None else n

    lines = [f"Edge from {name(src)} to {name(dst)} would create a cycle.\n"]
    for node_id in path:
        if node_id == dst:
            art = "+-> "
        elif node_id != src:
            art = "|   "
        else:
            art = "+-- "
        lines.append(f"{art}{name(node_id)}\n")
    return "".join(lines)
