"""Tests for tfxla_cluster.jit.graph_cycles, mirroring XLA's graphcycles_test.cc and
ordered_set_test.cc, plus exact-order tests derived by hand from graphcycles.cc."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfxla_cluster.jit.graph_cycles import GraphCycles, OrderedSet, describe_cycle


# --------------------------------------------------------------------------------------
# ordered_set_test.cc
# --------------------------------------------------------------------------------------

def test_ordered_set_insert():
    s = OrderedSet()
    assert s.insert(90) and s.insert(100) and s.insert(80)
    assert not s.insert(100)
    assert len(s) == 3
    assert 90 in s and 100 in s and 80 in s and 40 not in s
    assert s.sequence() == [90, 100, 80]


def test_ordered_set_erase_moves_last_into_hole():
    s = OrderedSet()
    for v in (90, 100, 80):
        s.insert(v)
    s.erase(100)
    assert len(s) == 2 and 100 not in s
    assert s.sequence() == [90, 80]
    s.erase(80)
    assert s.sequence() == [90]
    s.erase(90)
    assert s.sequence() == [] and len(s) == 0 and 90 not in s


def test_ordered_set_erase_from_middle_of_four():
    s = OrderedSet()
    for v in (1, 2, 3, 4):
        s.insert(v)
    s.erase(2)  # 4 moves into slot 1
    assert s.sequence() == [1, 4, 3]
    assert s.insert(2)
    assert s.sequence() == [1, 4, 3, 2]


def test_ordered_set_clear():
    s = OrderedSet()
    for v in (90, 100, 80):
        s.insert(v)
    s.clear()
    assert len(s) == 0 and list(s) == [] and 90 not in s


def test_ordered_set_large_insertions():
    s = OrderedSet()
    n = 50 * 900  # XLA uses 50 * 9000; smaller keeps the suite fast
    for i in range(n):
        assert s.insert(i + 500)
    assert s.sequence() == [i + 500 for i in range(n)]


# --------------------------------------------------------------------------------------
# graphcycles_test.cc: the GraphCyclesTest fixture (100 nodes, ids 0..99)
# --------------------------------------------------------------------------------------

@pytest.fixture
def g() -> GraphCycles:
    gc = GraphCycles()
    for i in range(100):
        assert gc.new_node() == i
    assert gc.check_invariants()
    return gc


def add_multiples(g: GraphCycles) -> None:
    for x in range(1, 25):
        assert g.insert_edge(x, 2 * x), x
        assert g.insert_edge(x, 3 * x), x
    assert g.check_invariants()


def path_str(g: GraphCycles, x: int, y: int, path_size: int = 5) -> str:
    """The fixture's Path(): XLA's FindPath with a 5-entry buffer."""
    path = g.find_path(x, y)
    out = []
    for i in range(len(path)):
        if i >= path_size:
            return " ".join(out) + " ..."
        out.append(str(path[i]))
    return " ".join(out)


def test_no_cycle(g):
    add_multiples(g)
    assert g.check_invariants()


def test_simple_cycle(g):
    add_multiples(g)
    assert not g.insert_edge(8, 4)
    assert path_str(g, 4, 8) == "4 8"
    assert g.check_invariants()


def test_indirect_cycle(g):
    add_multiples(g)
    assert g.insert_edge(16, 9)
    assert g.check_invariants()
    assert not g.insert_edge(9, 2)
    assert path_str(g, 2, 9) == "2 4 8 16 9"
    assert g.check_invariants()


def test_long_path(g):
    for a, b in ((2, 4), (4, 6), (6, 8), (8, 10), (10, 12)):
        assert g.insert_edge(a, b)
    assert not g.insert_edge(12, 2)
    assert path_str(g, 2, 12) == "2 4 6 8 10 ..."
    assert g.check_invariants()


def test_remove_node(g):
    for a, b in ((1, 2), (2, 3), (3, 4), (4, 5)):
        assert g.insert_edge(a, b)
    g.remove_node(3)
    assert g.insert_edge(5, 1)
    assert g.check_invariants()


def test_many_edges(g):
    n = 50
    for i in range(n):
        for j in range(1, n):
            assert g.insert_edge(i, i + j)
    assert g.check_invariants()
    assert g.insert_edge(2 * n - 1, 0)
    assert g.check_invariants()
    assert not g.insert_edge(10, 9)
    assert g.check_invariants()


def _diamond(g: GraphCycles) -> None:
    for a, b in ((1, 2), (1, 3), (2, 3), (2, 4), (3, 4)):
        assert g.insert_edge(a, b)


def test_contract_edge(g):
    _diamond(g)
    assert g.contract_edge(1, 3) is None
    assert g.check_invariants()
    assert g.has_edge(1, 3)
    # Node 2 has more edges, so it survives.
    assert g.contract_edge(1, 2) == 2
    assert g.check_invariants()
    assert g.has_edge(2, 3) and g.has_edge(2, 4) and g.has_edge(3, 4)
    assert g.contract_edge(2, 3) == 2
    assert g.check_invariants()
    assert g.has_edge(2, 4)


def test_can_contract_edge(g):
    _diamond(g)
    assert not g.can_contract_edge(1, 3)
    assert not g.can_contract_edge(2, 4)
    assert g.can_contract_edge(1, 2)
    assert g.can_contract_edge(2, 3)
    assert g.can_contract_edge(3, 4)
    assert g.check_invariants()


def test_contract_edge_requires_edge(g):
    with pytest.raises(ValueError, match="No edge exists from 1 to 2"):
        g.contract_edge(1, 2)
    with pytest.raises(ValueError):
        g.can_contract_edge(1, 2)


def test_self_edge_is_a_cycle(g):
    assert not g.insert_edge(7, 7)
    assert g.successors(7) == []


def test_duplicate_insert_is_a_noop(g):
    assert g.insert_edge(1, 2) and g.insert_edge(1, 3)
    assert g.insert_edge(1, 2)
    assert g.successors(1) == [2, 3]


def test_contract_edge_benchmark_shape():
    """BM_ContractEdge: every node points at the last; contract them all into it."""
    g = GraphCycles()
    n = 2000
    nodes = [g.new_node() for _ in range(n)]
    for i in range(n - 1):
        g.insert_edge(nodes[i], nodes[-1])
    node = n - 1
    for i in range(n - 1):
        node = g.contract_edge(nodes[i], node)
        # The hub keeps the larger degree until the last step, where both sides have
        # degree 0 and the tie keeps "a" (node n - 2).
        assert node == (n - 1 if i < n - 2 else n - 2)
    assert g.all_nodes_in_post_order() == [n - 2]
    assert g.check_invariants()


# --------------------------------------------------------------------------------------
# Exact orders, derived by hand from graphcycles.cc / ordered_set.h
# --------------------------------------------------------------------------------------

def fresh(n: int) -> GraphCycles:
    g = GraphCycles()
    for i in range(n):
        assert g.new_node() == i
    return g


def test_order_erase_moves_last_successor_into_hole():
    g = fresh(5)
    for y in (1, 2, 3, 4):
        g.insert_edge(0, y)
    g.remove_edge(0, 2)  # OrderedSet::Erase: the last element (4) fills slot 1
    assert g.successors(0) == [1, 4, 3]
    g.remove_edge(0, 2)  # removing a missing edge does nothing
    assert g.successors(0) == [1, 4, 3]


def test_order_reorder_puts_backward_set_first():
    """Insert 5->1 after 2->5, 4->5 and 1->3 (all ids start with rank = id).

    ForwardDFS(1, bound 5) finds {1, 3}. BackwardDFS(5, bound 1) finds {5, 2, 4}.
    Sorted by old rank: deltab = [2, 4, 5], deltaf = [1, 3]. The list is
    [2, 4, 5, 1, 3], and it receives the merged ranks [1, 2, 3, 4, 5]. So the new
    ranks are 2:1, 4:2, 5:3, 1:4, 3:5, and node 0 keeps rank 0.
    """
    g = fresh(6)
    for a, b in ((2, 5), (4, 5), (1, 3)):
        assert g.insert_edge(a, b)
    assert g.insert_edge(5, 1)
    assert [g.rank(i) for i in range(6)] == [0, 4, 1, 5, 2, 3]
    assert g.all_nodes_in_post_order() == [3, 1, 5, 4, 2, 0]
    assert g.check_invariants()


def test_order_failed_contraction_moves_edge_to_end():
    """ContractEdge(0, 2) with 0->1->2: remove 0->2 (3 fills its slot), find 2 still
    reachable, and re-insert 0->2 at the end of out(0) and in(2)."""
    g = fresh(4)
    for a, b in ((0, 1), (0, 2), (1, 2), (0, 3)):
        g.insert_edge(a, b)
    assert g.successors(0) == [1, 2, 3] and g.predecessors(2) == [0, 1]
    assert g.contract_edge(0, 2) is None
    assert g.successors(0) == [1, 3, 2]
    assert g.predecessors(2) == [1, 0]
    # CanContractEdge probes the same way, so it also moves the edge.
    assert g.can_contract_edge(0, 1)
    assert g.successors(0) == [2, 3, 1]
    assert g.check_invariants()


def test_order_contraction_swaps_to_higher_degree_node():
    """Edges, in order: 0->1, 1->6, 1->2, 2->3, 2->4, 0->2. ContractEdge(1, 2):

    * remove 1->2. 1 reaches only 6, so contraction is allowed.
    * deg(1) = |in [0]| + |out [6]| = 2 and deg(2) = |in [0]| + |out [3, 4]| = 3,
      so swap: 2 survives and 1 is freed.
    * detach 1: in(6) becomes [], out(0) = [1, 2] becomes [2] (2 fills slot 0).
    * re-insert 1's out-edges, then its in-edges: 2->6 appends, and 0->2 exists.
    """
    g = fresh(7)
    for a, b in ((0, 1), (1, 6), (1, 2), (2, 3), (2, 4), (0, 2)):
        g.insert_edge(a, b)
    assert g.contract_edge(1, 2) == 2
    assert g.successors(2) == [3, 4, 6]
    assert g.predecessors(2) == [0]
    assert g.successors(0) == [2]
    assert g.predecessors(6) == [2]
    assert g.all_nodes_in_post_order() == [6, 5, 4, 3, 2, 0]
    assert not g.is_live(1)
    assert g.new_node() == 1  # the freed id comes back, with its old rank 1
    assert g.all_nodes_in_post_order() == [6, 5, 4, 3, 2, 1, 0]
    assert g.check_invariants()


def test_order_contraction_in_edge_reinsertion_reorders():
    """Edges 0->2, 1->2, 2->3, 4->3, then ContractEdge(2, 3).

    * Inserting 4->3 with rank(4) = 4 > rank(3) = 3 reorders: deltaf = [3],
      deltab = [4], list [4, 3] <- ranks [3, 4]. So 4 gets rank 3 and 3 gets rank 4.
    * Contract: deg(3) = 1 (in [4]) and deg(2) = 2 (in [0, 1]), so there is no swap.
      3 is freed and keeps rank 4.
    * Re-inserting 4->2 finds rank(4) = 3 > rank(2) = 2: deltaf = [2], deltab = [4],
      list [4, 2] <- ranks [2, 3].
    * Post order by descending rank: 6, 5, 2(3), 4(2), 1, 0. The reused id 3 comes
      back with rank 4, so it now sorts before 2.
    """
    g = fresh(7)
    for a, b in ((0, 2), (1, 2), (2, 3), (4, 3)):
        g.insert_edge(a, b)
    assert (g.rank(3), g.rank(4)) == (4, 3)
    assert g.contract_edge(2, 3) == 2
    assert g.predecessors(2) == [0, 1, 4]
    assert g.successors(4) == [2]
    assert [g.rank(i) for i in range(7)] == [0, 1, 3, 4, 2, 5, 6]
    assert g.all_nodes_in_post_order() == [6, 5, 2, 4, 1, 0]
    assert g.new_node() == 3
    assert g.all_nodes_in_post_order() == [6, 5, 3, 2, 4, 1, 0]
    assert g.check_invariants()


def test_free_ids_are_reused_last_in_first_out():
    g = fresh(5)
    g.insert_edge(0, 1)
    g.remove_node(1)
    g.remove_node(3)
    assert g.successors(0) == []
    assert g.all_nodes_in_post_order() == [4, 2, 0]
    assert [g.new_node(), g.new_node(), g.new_node()] == [3, 1, 5]
    assert g.get_node_data(3) is None
    with pytest.raises(ValueError):
        g.remove_node(17)


def test_find_path_explores_last_successor_first():
    """FindPath pushes successors in order, so it pops (explores) the last one first."""
    g = fresh(4)
    for a, b in ((0, 1), (0, 2), (1, 3), (2, 3)):
        g.insert_edge(a, b)
    assert g.find_path(0, 3) == [0, 2, 3]
    assert g.find_path(3, 0) == []
    assert g.find_path(2, 2) == [2]
    assert g.is_reachable(0, 3) and not g.is_reachable(1, 2)


def test_find_path_marks_nodes_seen_when_pushed():
    """Edges 0->1, 0->2, 2->1, 1->3. FindPath(0, 3) pushes 1 and 2 and marks both
    seen. When it expands 2, it does not push 1 again, so 1 is reached from 0
    and the path is 0 1 3, not 0 2 1 3."""
    g = fresh(4)
    for a, b in ((0, 1), (0, 2), (2, 1), (1, 3)):
        g.insert_edge(a, b)
    assert g.find_path(0, 3) == [0, 1, 3]


def test_debug_string():
    g = fresh(3)
    g.insert_edge(0, 2)
    g.insert_edge(0, 1)
    g.insert_edge(1, 2)
    assert g.debug_string() == 'digraph {\n  "0" -> "2"\n  "0" -> "1"\n  "1" -> "2"\n}\n'


def test_check_invariants_reports_stale_visited_marker():
    g = fresh(3)
    g._visited[1] = True
    with pytest.raises(AssertionError, match="Did not clear visited marker on node 1"):
        g.check_invariants()


# --------------------------------------------------------------------------------------
# describe_cycle (xla_cluster_util.cc DescribeCycle)
# --------------------------------------------------------------------------------------

def test_describe_cycle_illegal_cycle_message():
    """mark_for_compilation_pass_test IllegalCycle_UsefulErrorMessage: NoOps a->b->c->a."""
    names = ["_SOURCE", "_SINK", "a", "b", "c"]
    g = fresh(len(names))
    assert g.insert_edge(2, 3) and g.insert_edge(3, 4)
    assert not g.insert_edge(4, 2)
    msg = describe_cycle(g, names.__getitem__, src=4, dst=2, num_node_ids=len(names))
    assert msg == "Edge from c to a would create a cycle.\n+-> a\n|   b\n+-- c\n"


def test_describe_cycle_null_names_and_no_path():
    g = fresh(4)  # ids 0..2 are graph nodes, 3 is a frame node
    g.insert_edge(0, 3)
    g.insert_edge(3, 1)
    names = {0: "x", 1: "y"}
    msg = describe_cycle(g, names.get, src=1, dst=0, num_node_ids=3)
    assert msg == "Edge from y to x would create a cycle.\n+-> x\n|   (null)\n+-- y\n"
    assert describe_cycle(g, names.get, src=0, dst=1) == ""


# --------------------------------------------------------------------------------------
# RandomizedTest: random ops against a naive model, with XLA's order semantics
# --------------------------------------------------------------------------------------

def _erase(lst: list[int], v: int) -> None:
    """The naive model of OrderedSet::Erase."""
    i = lst.index(v)
    last = lst.pop()
    if i < len(lst):
        lst[i] = last


class Model:
    """Live nodes plus ordered in/out lists, with no ranks. Every order-visible effect
    of GraphCycles is a function of this state alone."""

    def __init__(self) -> None:
        self.nodes: list[int] = []
        self.out: dict[int, list[int]] = {}
        self.inn: dict[int, list[int]] = {}
        self.free: list[int] = []
        self.next_fresh = 0

    def reachable(self, a: int, b: int) -> bool:
        seen, stack = {a}, [a]
        while stack:
            n = stack.pop()
            if n == b:
                return True
            for w in self.out[n]:
                if w not in seen:
                    seen.add(w)
                    stack.append(w)
        return False

    def edges(self) -> list[tuple[int, int]]:
        return [(a, b) for a in self.nodes for b in self.out[a]]

    def new_node(self) -> int:
        if self.free:
            n = self.free.pop()
        else:
            n = self.next_fresh
            self.next_fresh += 1
        self.nodes.append(n)
        self.out[n], self.inn[n] = [], []
        return n

    def remove_node(self, n: int) -> None:
        for y in self.out[n]:
            _erase(self.inn[y], n)
        for y in self.inn[n]:
            _erase(self.out[y], n)
        del self.out[n], self.inn[n]
        self.nodes.remove(n)
        self.free.append(n)

    def insert_edge(self, a: int, b: int) -> bool:
        if a == b:
            return False
        if b in self.out[a]:
            return True
        if self.reachable(b, a):
            return False
        self.out[a].append(b)
        self.inn[b].append(a)
        return True

    def remove_edge(self, a: int, b: int) -> None:
        _erase(self.out[a], b)
        _erase(self.inn[b], a)

    def contract_edge(self, a: int, b: int) -> int | None:
        self.remove_edge(a, b)
        if self.reachable(a, b):
            self.insert_edge(a, b)
            return None
        if len(self.inn[b]) + len(self.out[b]) > len(self.inn[a]) + len(self.out[a]):
            a, b = b, a
        b_out, b_in = self.out[b], self.inn[b]
        self.out[b], self.inn[b] = [], []
        for y in b_out:
            _erase(self.inn[y], b)
        for y in b_in:
            _erase(self.out[y], b)
        del self.out[b], self.inn[b]
        self.nodes.remove(b)
        self.free.append(b)
        for y in b_out:
            assert self.insert_edge(a, y)
        for y in b_in:
            assert self.insert_edge(y, a)
        return a


def check_against_model(g: GraphCycles, m: Model) -> None:
    assert g.check_invariants()
    for n in m.nodes:
        assert g.is_live(n)
        assert g.successors(n) == m.out[n], n
        assert g.predecessors(n) == m.inn[n], n
    post = g.all_nodes_in_post_order()
    assert sorted(post) == sorted(m.nodes)
    where = {n: i for i, n in enumerate(post)}
    for a, b in m.edges():
        assert where[b] < where[a]  # post order: successors first


def check_transitive_closure(g: GraphCycles, m: Model) -> None:
    for a in m.nodes:
        for b in m.nodes:
            r = g.is_reachable(a, b)
            assert r == g.is_reachable_non_const(a, b) == m.reachable(a, b), (a, b)


# Relative frequencies of ops 0..8 below. Edge inserts dominate so that graphs get
# dense enough for reorders, refused cycles and refused contractions.
_OP_WEIGHTS = (3, 1, 8, 1, 1, 1, 3, 1, 1)


def run_random_ops(rnd: random.Random, iters: int, max_nodes: int = 7) -> None:
    g, m = GraphCycles(), Model()
    for _ in range(iters):
        op = rnd.choices(range(9), _OP_WEIGHTS)[0]
        if op == 0:  # add a node
            if len(m.nodes) < max_nodes:
                expected = m.new_node()
                assert g.new_node() == expected
                assert g.get_node_data(expected) is None
                g.set_node_data(expected, expected + 17)
        elif op == 1 and m.nodes:  # remove a node
            n = rnd.choice(m.nodes)
            m.remove_node(n)
            g.remove_node(n)
        elif op == 2 and m.nodes:  # add an edge
            a, b = rnd.choice(m.nodes), rnd.choice(m.nodes)
            assert g.insert_edge(a, b) == m.insert_edge(a, b)
        elif op == 3 and m.edges():  # remove an edge
            a, b = rnd.choice(m.edges())
            m.remove_edge(a, b)
            g.remove_edge(a, b)
        elif op == 4 and m.nodes:  # check a path
            a, b = rnd.choice(m.nodes), rnd.choice(m.nodes)
            path = g.find_path(a, b)
            assert bool(path) == m.reachable(a, b) == g.is_reachable_non_const(a, b)
            assert len(path) <= max_nodes + 1
            if path:
                assert path[0] == a and path[-1] == b
                assert all(g.has_edge(p, q) and q in m.out[p] for p, q in zip(path, path[1:]))
        elif op == 5:
            check_transitive_closure(g, m)
        elif op == 6 and m.edges():  # contract an edge
            a, b = rnd.choice(m.edges())
            assert g.contract_edge(a, b) == m.contract_edge(a, b)
        elif op == 7 and m.edges():  # probe an edge
            a, b = rnd.choice(m.edges())
            m.remove_edge(a, b)
            expected = not m.reachable(a, b)
            m.insert_edge(a, b)
            assert g.can_contract_edge(a, b) == expected
        elif op == 8:
            for n in m.nodes:
                assert g.get_node_data(n) == n + 17
        check_against_model(g, m)

        if rnd.random() < 1 / 256:  # graph expansion: add then remove many nodes
            for _ in range(64):
                expected = m.new_node()
                assert g.new_node() == expected
                g.set_node_data(expected, expected + 17)
            for _ in range(64):
                n = rnd.choice(m.nodes)
                m.remove_node(n)
                g.remove_node(n)
            check_against_model(g, m)


@pytest.mark.parametrize("seed", range(6))
def test_randomized(seed):
    run_random_ops(random.Random(seed), 1500)


def test_randomized_larger_graphs():
    run_random_ops(random.Random(1234), 1500, max_nodes=25)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(min_value=0, max_value=2**32), st.integers(min_value=2, max_value=12))
def test_randomized_hypothesis(seed, max_nodes):
    run_random_ops(random.Random(seed), 120, max_nodes=max_nodes)


def test_random_dag_contraction_matches_model():
    """Contraction-heavy: a random forward DAG contracted along post order, as in
    MarkForCompilationPass's ForEachEdgeInPostOrder."""
    rnd = random.Random(7)
    g, m = GraphCycles(), Model()
    for _ in range(60):
        assert g.new_node() == m.new_node()
    for _ in range(150):
        a = rnd.randrange(59)
        b = rnd.randrange(a + 1, 60)
        if rnd.random() < 0.1:
            a, b = b, a
        assert g.insert_edge(a, b) == m.insert_edge(a, b)
    check_against_model(g, m)
    for node in g.all_nodes_in_post_order():
        if not g.is_live(node):
            continue
        for succ in g.successors_copy(node):
            if not (g.is_live(node) and g.is_live(succ) and g.has_edge(node, succ)):
                continue
            r = g.contract_edge(node, succ)
            assert r == m.contract_edge(node, succ)
            if r is not None:
                node = r
            check_against_model(g, m)


def test_scale_mostly_forward_graph():
    """20k nodes and ~60k edges, about 5% of them backward. It guards against
    quadratic behaviour; the 100k/300k timing lives in the report, not in a test."""
    rnd = random.Random(3)
    g = GraphCycles()
    n = 20_000
    for _ in range(n):
        g.new_node()
    inserted = 0
    for i in range(n - 1):
        for _ in range(3):
            j = min(n - 1, i + rnd.randint(1, 40))
            a, b = (j, i) if rnd.random() < 0.05 else (i, j)
            inserted += g.insert_edge(a, b)
    assert inserted > 50_000
    post = g.all_nodes_in_post_order()
    where = {node: k for k, node in enumerate(post)}
    assert all(where[s] < where[x] for x in range(n) for s in g.successors(x))
    contracted = 0
    for node in post[:5000]:
        if g.is_live(node):
            for s in g.successors_copy(node):
                if g.is_live(node) and g.has_edge(node, s):
                    r = g.contract_edge(node, s)
                    if r is not None:
                        node = r
                        contracted += 1
    assert contracted > 1000
    assert g.check_invariants()


def test_new_nodes_bulk_matches_new_node_calls():
    bulk, one = GraphCycles(), GraphCycles()
    bulk.new_nodes(5)
    for _ in range(5):
        one.new_node()
    for g in (bulk, one):
        assert g.insert_edge(3, 1) and g.insert_edge(1, 4) and not g.insert_edge(4, 3)
    assert [bulk.rank(i) for i in range(5)] == [one.rank(i) for i in range(5)]
    assert bulk.all_nodes_in_post_order() == one.all_nodes_in_post_order()
    assert bulk.new_node() == one.new_node() == 5
    bulk.remove_node(2)
    with pytest.raises(ValueError):
        bulk.new_nodes(1)


@pytest.mark.parametrize("seed,backward", [(s, 0.04) for s in range(5)] + [(0, 0.0)])
def test_insert_edges_matches_insert_edge_calls(seed, backward):
    """The bulk insert (used to build the pass's cycle graph) leaves ranks and every successor and
    predecessor order exactly as one insert_edge per edge would, duplicates, self-loops and reorders
    included, and stops at the first edge that closes a cycle."""
    rnd = random.Random(seed)
    n = 60
    edges = []
    for _ in range(200):
        i = rnd.randrange(n - 1)
        j = min(n - 1, i + rnd.randint(1, 8))
        edges.append((j, i) if rnd.random() < backward else (i, j))
    edges.append((5, 5))   # a self-loop is refused, as insert_edge refuses it
    bulk, one = GraphCycles(), GraphCycles()
    bulk.new_nodes(n)
    one.new_nodes(n)
    stop = bulk.insert_edges(edges)
    expected = -1
    for k, (a, b) in enumerate(edges):
        if not one.insert_edge(a, b):
            expected = k
            break
    assert stop == expected
    assert [bulk.rank(i) for i in range(n)] == [one.rank(i) for i in range(n)]
    assert all(bulk.successors(i) == one.successors(i) and bulk.predecessors(i) == one.predecessors(i)
               for i in range(n))
    assert bulk.check_invariants()
