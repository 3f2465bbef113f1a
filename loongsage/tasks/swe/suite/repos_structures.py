"""Small data structures and algorithms: ring buffer, LRU cache, intervals, search, graphs."""

from __future__ import annotations

from loongsage.tasks.swe.suite.spec import Bug, SuiteTask, source

RINGBUFFER = {
    "ringbuffer.py": source('''
        """A fixed-size buffer that keeps the most recent items."""


        class RingBuffer:
            def __init__(self, capacity):
                if capacity < 1:
                    raise ValueError("capacity must be at least 1")
                self.capacity = capacity
                self._items = []

            def push(self, item):
                self._items.append(item)
                if len(self._items) > self.capacity:
                    self._items.pop(0)

            def latest(self):
                if not self._items:
                    raise IndexError("latest() of an empty buffer")
                return self._items[-1]

            def to_list(self):
                """Oldest first."""
                return list(self._items)

            def __len__(self):
                return len(self._items)
    '''),
    "tests/test_ringbuffer.py": source("""
        import pytest

        from ringbuffer import RingBuffer


        def test_keeps_capacity_items():
            buffer = RingBuffer(3)
            for item in range(3):
                buffer.push(item)
            assert buffer.to_list() == [0, 1, 2]


        def test_drops_oldest():
            buffer = RingBuffer(2)
            for item in "abc":
                buffer.push(item)
            assert buffer.to_list() == ["b", "c"]


        def test_latest():
            buffer = RingBuffer(2)
            buffer.push(1)
            buffer.push(2)
            assert buffer.latest() == 2


        def test_latest_of_empty():
            with pytest.raises(IndexError):
                RingBuffer(1).latest()


        def test_bad_capacity():
            with pytest.raises(ValueError):
                RingBuffer(0)
    """),
}

LRU = {
    "lrucache.py": source('''
        """A least-recently-used cache."""
        from collections import OrderedDict


        class LRUCache:
            def __init__(self, capacity):
                if capacity < 1:
                    raise ValueError("capacity must be at least 1")
                self.capacity = capacity
                self._data = OrderedDict()

            def get(self, key, default=None):
                """The cached value (which then counts as recently used), else default."""
                if key not in self._data:
                    return default
                self._data.move_to_end(key)
                return self._data[key]

            def put(self, key, value):
                if key in self._data:
                    self._data.move_to_end(key)
                self._data[key] = value
                if len(self._data) > self.capacity:
                    self._data.popitem(last=False)

            def __len__(self):
                return len(self._data)
    '''),
    "tests/test_lrucache.py": source("""
        from lrucache import LRUCache


        def test_get_and_put():
            cache = LRUCache(2)
            cache.put("a", 1)
            assert cache.get("a") == 1
            assert cache.get("zzz", "none") == "none"


        def test_evicts_least_recently_put():
            cache = LRUCache(2)
            cache.put("a", 1)
            cache.put("b", 2)
            cache.put("c", 3)
            assert cache.get("a") is None
            assert cache.get("c") == 3


        def test_get_refreshes_entry():
            cache = LRUCache(2)
            cache.put("a", 1)
            cache.put("b", 2)
            cache.get("a")
            cache.put("c", 3)
            assert cache.get("a") == 1
            assert cache.get("b") is None


        def test_update_existing_key():
            cache = LRUCache(2)
            cache.put("a", 1)
            cache.put("a", 5)
            assert len(cache) == 1
            assert cache.get("a") == 5
    """),
}

INTERVALS = {
    "intervals.py": source('''
        """Merging closed intervals (start, end)."""


        def merge_intervals(intervals):
            """Overlapping or touching intervals merged, sorted by start."""
            merged = []
            for start, end in sorted(intervals):
                if merged and start <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], end)
                else:
                    merged.append([start, end])
            return [tuple(pair) for pair in merged]


        def total_length(intervals):
            return sum(end - start for start, end in merge_intervals(intervals))
    '''),
    "tests/test_intervals.py": source("""
        from intervals import merge_intervals, total_length


        def test_disjoint_sorted():
            assert merge_intervals([(5, 6), (1, 2)]) == [(1, 2), (5, 6)]


        def test_overlapping():
            assert merge_intervals([(1, 4), (3, 6)]) == [(1, 6)]


        def test_touching():
            assert merge_intervals([(1, 2), (2, 3)]) == [(1, 3)]


        def test_contained():
            assert merge_intervals([(1, 10), (2, 3)]) == [(1, 10)]


        def test_total_length():
            assert total_length([(1, 4), (3, 6), (10, 11)]) == 6


        def test_empty():
            assert merge_intervals([]) == []
    """),
}

BINSEARCH = {
    "binsearch.py": source('''
        """Binary search over a sorted list."""


        def binary_search(items, target):
            """The index of target in the sorted list items, or -1."""
            low, high = 0, len(items) - 1
            while low <= high:
                middle = (low + high) // 2
                if items[middle] == target:
                    return middle
                if items[middle] < target:
                    low = middle + 1
                else:
                    high = middle - 1
            return -1
    '''),
    "tests/test_binsearch.py": source("""
        from binsearch import binary_search


        def test_found_in_middle():
            assert binary_search([1, 3, 5, 7, 9], 5) == 2


        def test_found_at_end():
            assert binary_search([1, 3, 5, 7, 9], 9) == 4


        def test_single_element():
            assert binary_search([4], 4) == 0


        def test_missing():
            assert binary_search([1, 3, 5], 4) == -1


        def test_empty():
            assert binary_search([], 1) == -1
    """),
}

GRAPH = {
    "graphs.py": source('''
        """Breadth-first search on a graph given as {node: [neighbours]}."""
        from collections import deque


        def shortest_path(graph, start, goal):
            """The nodes of a shortest path from start to goal, both included; None if
            there is no path."""
            previous = {start: None}
            queue = deque([start])
            while queue:
                node = queue.popleft()
                if node == goal:
                    break
                for neighbour in graph.get(node, ()):
                    if neighbour not in previous:
                        previous[neighbour] = node
                        queue.append(neighbour)
            if goal not in previous:
                return None
            path = []
            node = goal
            while node is not None:
                path.append(node)
                node = previous[node]
            return path[::-1]


        def reachable(graph, start):
            return set() if start not in graph else set(_visit(graph, start))


        def _visit(graph, start):
            seen, stack = {start}, [start]
            while stack:
                node = stack.pop()
                yield node
                for neighbour in graph.get(node, ()):
                    if neighbour not in seen:
                        seen.add(neighbour)
                        stack.append(neighbour)
    '''),
    "tests/test_graphs.py": source("""
        from graphs import reachable, shortest_path

        GRAPH = {
            "a": ["b", "c"],
            "b": ["e"],
            "c": ["d"],
            "d": ["e"],
            "e": [],
            "x": ["y"],
        }


        def test_direct_edge():
            assert shortest_path(GRAPH, "a", "b") == ["a", "b"]


        def test_shortest_of_two_routes():
            assert shortest_path(GRAPH, "a", "e") == ["a", "b", "e"]


        def test_no_path():
            assert shortest_path(GRAPH, "a", "x") is None


        def test_start_is_goal():
            assert shortest_path(GRAPH, "a", "a") == ["a"]


        def test_reachable():
            assert reachable(GRAPH, "c") == {"c", "d", "e"}
    """),
}

BRACKETS = {
    "brackets.py": source('''
        """Checking that brackets are balanced."""

        _PAIRS = {")": "(", "]": "[", "}": "{"}


        def is_balanced(text):
            stack = []
            for char in text:
                if char in "([{":
                    stack.append(char)
                elif char in _PAIRS:
                    if not stack or stack.pop() != _PAIRS[char]:
                        return False
            return not stack


        def first_unmatched(text):
            """Index of the first closing bracket without a partner, or -1."""
            depth = 0
            for index, char in enumerate(text):
                if char in "([{":
                    depth += 1
                elif char in _PAIRS:
                    depth -= 1
                    if depth < 0:
                        return index
            return -1
    '''),
    "tests/test_brackets.py": source("""
        from brackets import first_unmatched, is_balanced


        def test_balanced_nested():
            assert is_balanced("{[()()]}")


        def test_wrong_order():
            assert not is_balanced("([)]")


        def test_unclosed():
            assert not is_balanced("((")


        def test_extra_closing():
            assert not is_balanced("())")


        def test_first_unmatched():
            assert first_unmatched("(a))b") == 3


        def test_first_unmatched_none():
            assert first_unmatched("(())") == -1
    """),
}

TASKS = [
    SuiteTask(
        instance_id="ringbuffer__capacity-off-by-one",
        difficulty="easy",
        problem_statement="""
            `RingBuffer` in ringbuffer.py holds one item less than its capacity

            ```python
            >>> from ringbuffer import RingBuffer
            >>> buffer = RingBuffer(3)
            >>> for item in range(3):
            ...     buffer.push(item)
            >>> buffer.to_list()
            [1, 2]
            ```

            Expected `[0, 1, 2]`: the oldest item should only be dropped once the buffer has
            more than `capacity` items (see `push`).
        """,
        files=RINGBUFFER,
        bugs=(Bug("ringbuffer.py", "len(self._items) > self.capacity", "len(self._items) >= self.capacity"),),
        fail_to_pass=(
            "tests/test_ringbuffer.py::test_keeps_capacity_items",
            "tests/test_ringbuffer.py::test_drops_oldest",
        ),
        pass_to_pass=("tests/test_ringbuffer.py::test_latest", "tests/test_ringbuffer.py::test_bad_capacity"),
    ),
    SuiteTask(
        instance_id="ringbuffer__drops-newest",
        difficulty="easy",
        problem_statement="""
            `RingBuffer.push` in ringbuffer.py throws away the new item instead of the oldest

            ```python
            >>> from ringbuffer import RingBuffer
            >>> buffer = RingBuffer(2)
            >>> for item in "abc":
            ...     buffer.push(item)
            >>> buffer.to_list()
            ['a', 'b']
            ```

            Expected `['b', 'c']`: a full buffer should keep the most recent items.
        """,
        files=RINGBUFFER,
        bugs=(Bug("ringbuffer.py", "self._items.pop(0)", "self._items.pop()"),),
        fail_to_pass=("tests/test_ringbuffer.py::test_drops_oldest",),
        pass_to_pass=(
            "tests/test_ringbuffer.py::test_keeps_capacity_items",
            "tests/test_ringbuffer.py::test_latest",
            "tests/test_ringbuffer.py::test_latest_of_empty",
        ),
    ),
    SuiteTask(
        instance_id="lrucache__evicts-newest",
        difficulty="easy",
        problem_statement="""
            `LRUCache.put` in lrucache.py evicts the entry that was just added

            ```python
            >>> from lrucache import LRUCache
            >>> cache = LRUCache(2)
            >>> cache.put("a", 1); cache.put("b", 2); cache.put("c", 3)
            >>> cache.get("c")
            >>> cache.get("a")
            1
            ```

            Expected `cache.get("c") == 3` and `cache.get("a") is None`: when the cache is
            full, the least recently used entry should go (`popitem` takes it from the front
            when `last=False`).
        """,
        files=LRU,
        bugs=(Bug("lrucache.py", "self._data.popitem(last=False)", "self._data.popitem(last=True)"),),
        fail_to_pass=(
            "tests/test_lrucache.py::test_evicts_least_recently_put",
            "tests/test_lrucache.py::test_get_refreshes_entry",
        ),
        pass_to_pass=("tests/test_lrucache.py::test_get_and_put", "tests/test_lrucache.py::test_update_existing_key"),
    ),
    SuiteTask(
        instance_id="lrucache__get-not-refreshing",
        difficulty="medium",
        problem_statement="""
            Reading an entry does not protect it from eviction

            ```python
            >>> from lrucache import LRUCache
            >>> cache = LRUCache(2)
            >>> cache.put("a", 1); cache.put("b", 2)
            >>> cache.get("a")
            1
            >>> cache.put("c", 3)
            >>> cache.get("a")   # None, but "a" was used more recently than "b"
            ```

            Expected `1` for the last call and `"b"` to be evicted instead. It behaves like a
            FIFO queue, not an LRU cache.
        """,
        files=LRU,
        bugs=(
            Bug(
                "lrucache.py", "            return default\n        self._data.move_to_end(key)\n", "            return default\n"
            ),
        ),
        fail_to_pass=("tests/test_lrucache.py::test_get_refreshes_entry",),
        pass_to_pass=(
            "tests/test_lrucache.py::test_get_and_put",
            "tests/test_lrucache.py::test_evicts_least_recently_put",
            "tests/test_lrucache.py::test_update_existing_key",
        ),
    ),
    SuiteTask(
        instance_id="intervals__touching",
        difficulty="easy",
        problem_statement="""
            `merge_intervals` in intervals.py does not merge touching intervals

            ```python
            >>> from intervals import merge_intervals
            >>> merge_intervals([(1, 2), (2, 3)])
            [(1, 2), (2, 3)]
            ```

            Expected `[(1, 3)]`: the intervals are closed, so they share the point 2.
        """,
        files=INTERVALS,
        bugs=(Bug("intervals.py", "start <= merged[-1][1]", "start < merged[-1][1]"),),
        fail_to_pass=("tests/test_intervals.py::test_touching",),
        pass_to_pass=(
            "tests/test_intervals.py::test_disjoint_sorted",
            "tests/test_intervals.py::test_overlapping",
            "tests/test_intervals.py::test_contained",
        ),
    ),
    SuiteTask(
        instance_id="intervals__contained",
        difficulty="medium",
        problem_statement="""
            An interval inside another one shrinks the result

            ```python
            >>> from intervals import merge_intervals, total_length
            >>> merge_intervals([(1, 10), (2, 3)])
            [(1, 3)]
            ```

            Expected `[(1, 10)]`. `total_length` is wrong for the same input.
        """,
        files=INTERVALS,
        bugs=(Bug("intervals.py", "merged[-1][1] = max(merged[-1][1], end)", "merged[-1][1] = end"),),
        fail_to_pass=("tests/test_intervals.py::test_contained",),
        pass_to_pass=(
            "tests/test_intervals.py::test_overlapping",
            "tests/test_intervals.py::test_touching",
            "tests/test_intervals.py::test_total_length",
        ),
    ),
    SuiteTask(
        instance_id="binsearch__single-element",
        difficulty="easy",
        problem_statement="""
            `binary_search` in binsearch.py misses the last candidate

            ```python
            >>> from binsearch import binary_search
            >>> binary_search([4], 4)
            -1
            >>> binary_search([1, 3, 5, 7, 9], 9)
            -1
            ```

            Expected `0` and `4`. The loop seems to stop while one candidate is left.
        """,
        files=BINSEARCH,
        bugs=(Bug("binsearch.py", "while low <= high:", "while low < high:"),),
        fail_to_pass=("tests/test_binsearch.py::test_single_element", "tests/test_binsearch.py::test_found_at_end"),
        pass_to_pass=(
            "tests/test_binsearch.py::test_found_in_middle",
            "tests/test_binsearch.py::test_missing",
            "tests/test_binsearch.py::test_empty",
        ),
    ),
    SuiteTask(
        instance_id="graphs__path-reversed",
        difficulty="easy",
        problem_statement="""
            `shortest_path` in graphs.py returns the path backwards

            ```python
            >>> from graphs import shortest_path
            >>> shortest_path({"a": ["b"], "b": []}, "a", "b")
            ['b', 'a']
            ```

            Expected `['a', 'b']`, from start to goal.
        """,
        files=GRAPH,
        bugs=(Bug("graphs.py", "return path[::-1]", "return path"),),
        fail_to_pass=("tests/test_graphs.py::test_direct_edge", "tests/test_graphs.py::test_shortest_of_two_routes"),
        pass_to_pass=(
            "tests/test_graphs.py::test_no_path",
            "tests/test_graphs.py::test_start_is_goal",
            "tests/test_graphs.py::test_reachable",
        ),
    ),
    SuiteTask(
        instance_id="graphs__not-shortest",
        difficulty="medium",
        problem_statement="""
            shortest_path does not return the shortest path

            ```python
            >>> from graphs import shortest_path
            >>> graph = {"a": ["b", "c"], "b": ["e"], "c": ["d"], "d": ["e"], "e": []}
            >>> shortest_path(graph, "a", "e")
            ['a', 'c', 'd', 'e']
            ```

            Expected `['a', 'b', 'e']` (two edges instead of three). It looks like the search
            goes depth-first.
        """,
        files=GRAPH,
        bugs=(Bug("graphs.py", "node = queue.popleft()", "node = queue.pop()"),),
        fail_to_pass=("tests/test_graphs.py::test_shortest_of_two_routes",),
        pass_to_pass=(
            "tests/test_graphs.py::test_direct_edge",
            "tests/test_graphs.py::test_no_path",
            "tests/test_graphs.py::test_reachable",
        ),
    ),
    SuiteTask(
        instance_id="brackets__unclosed",
        difficulty="easy",
        problem_statement="""
            `is_balanced` in brackets.py accepts unclosed brackets

            ```python
            >>> from brackets import is_balanced
            >>> is_balanced("((")
            True
            ```

            Expected `False`: the text is only balanced if no bracket is left open at the end.
        """,
        files=BRACKETS,
        bugs=(Bug("brackets.py", "    return not stack\n", "    return True\n"),),
        fail_to_pass=("tests/test_brackets.py::test_unclosed",),
        pass_to_pass=(
            "tests/test_brackets.py::test_balanced_nested",
            "tests/test_brackets.py::test_wrong_order",
            "tests/test_brackets.py::test_extra_closing",
        ),
    ),
    SuiteTask(
        instance_id="brackets__first-unmatched",
        difficulty="medium",
        problem_statement="""
            first_unmatched reports a position one step too late

            ```python
            >>> from brackets import first_unmatched
            >>> first_unmatched("(a))b")
            -1
            ```

            Expected `3`: the second ")" has no partner. `is_balanced("(a))b")` correctly says
            False.
        """,
        files=BRACKETS,
        bugs=(Bug("brackets.py", "if depth < 0:", "if depth < -1:"),),
        fail_to_pass=("tests/test_brackets.py::test_first_unmatched",),
        pass_to_pass=(
            "tests/test_brackets.py::test_first_unmatched_none",
            "tests/test_brackets.py::test_balanced_nested",
            "tests/test_brackets.py::test_extra_closing",
        ),
    ),
]
