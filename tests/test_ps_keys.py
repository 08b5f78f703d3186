"""The parameter server's key space: ranges, routing indexes, flattening, bad keys."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidist.parallel.ps import KeyLayout
from minidist.parallel.ps.keys import gather_index
from minidist.parallel.ps.messages import Header, Kind, pack, unpack

tables = st.dictionaries(st.sampled_from("abcdefgh"),
                         st.tuples(st.integers(1, 9), st.integers(1, 7)), min_size=1)


@settings(max_examples=60, deadline=None)
@given(tables, st.integers(1, 6))
def test_split_covers_every_key_once_with_balanced_values(spec, servers):
    layout = KeyLayout(spec)
    servers = min(servers, layout.num_keys)
    ranges = layout.split(servers)
    assert ranges[0][0] == 0 and ranges[-1][1] == layout.num_keys
    assert all(a < b for a, b in ranges)
    assert all(ranges[i][1] == ranges[i + 1][0] for i in range(servers - 1))
    ideal = layout.num_values / servers
    widest = int(layout.widths.max())
    for first, end in ranges:  # off the ideal by less than a row each side
        held = layout.offsets[end] - layout.offsets[first]
        assert held <= ideal + 2 * widest or end - first == 1


@settings(max_examples=60, deadline=None)
@given(tables, st.data())
def test_value_index_and_gather_index_follow_the_keys(spec, data):
    layout = KeyLayout(spec)
    values = np.arange(layout.num_values, dtype=np.float64)
    keys = np.array(data.draw(st.lists(st.integers(0, layout.num_keys - 1), unique=True,
                                       min_size=1)), np.int64)
    rows = [values[layout.offsets[k]:layout.offsets[k + 1]] for k in keys]
    expected = np.concatenate(rows)
    np.testing.assert_array_equal(values[layout.value_index(keys)], expected)
    order = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(expected[gather_index(layout, keys, order)],
                                  np.concatenate([rows[i] for i in order]))
    base = int(keys.min())
    shard = values[layout.offsets[base]:]
    np.testing.assert_array_equal(shard[layout.value_index(np.sort(keys), base=base)],
                                  values[layout.value_index(np.sort(keys))])


def test_dense_arrays_become_tables_of_rows():
    layout = KeyLayout.of_arrays({"W": (4, 3, 2), "b": (6,), "s": ()})
    assert layout.tables == {"W": (4, 6), "b": (1, 6), "s": (1, 1)}
    arrays = {"W": np.ones((4, 3, 2)), "b": np.full(6, 2.0), "s": np.array(3.0)}
    flat = layout.flatten(arrays)
    assert flat.size == 31 and flat[layout.table_slice("b")].tolist() == [2.0] * 6
    assert layout.value_index(layout.keys("b")) == slice(24, 30)  # one run: no gather
    np.testing.assert_array_equal(layout.keys("W", [1, 3]), [1, 3])


def test_bad_keys_and_layouts_are_named():
    layout = KeyLayout({"emb": (10, 4)})
    with pytest.raises(KeyError, match="key 10 is outside every server's range 0..9"):
        layout.check(np.array([3, 10]))
    with pytest.raises(ValueError, match="distinct"):
        layout.check(np.array([3, 3]))
    with pytest.raises(ValueError, match="1-D integer"):
        layout.check(np.array([1.0]))
    with pytest.raises(ValueError, match="rows 0..9"):
        layout.keys("emb", [12])
    with pytest.raises(ValueError, match="at least one server"):
        layout.split(0)
    with pytest.raises(ValueError, match="11 servers but only 10 keys"):
        layout.split(11)
    with pytest.raises(ValueError, match="rows and width must be >= 1"):
        KeyLayout({"x": (0, 3)})


def test_header_and_payload_round_trip():
    header = Header(Kind.PUSH, clock=7, keys=2, values=5, version=3)
    assert Header.from_array(header.to_array()) == header
    keys, values = np.array([4, 9]), np.arange(5, dtype=np.float32)
    payload = np.empty(header.payload_bytes(4), np.uint8)
    got_keys, got_values = unpack(pack(keys, values, payload), 2, np.dtype(np.float32))
    np.testing.assert_array_equal(got_keys, keys)
    np.testing.assert_array_equal(got_values, values)
    assert header.payload_bytes(4) == 2 * 8 + 5 * 4


def test_split_by_load_gives_popular_keys_narrower_ranges():
    layout = KeyLayout({"ids": (100, 4)})
    load = 1.0 / np.arange(1, 101)  # Zipf: key 0 is requested most
    ranges = layout.split(4, load)
    sizes = [end - first for first, end in ranges]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    shares = [load[first:end].sum() / load.sum() for first, end in ranges]
    assert max(shares) < 0.25 + load[0] / load.sum()  # within one key of 1/S
    with pytest.raises(ValueError, match="one weight >= 0 per key"):
        layout.split(2, np.ones(3))


@settings(max_examples=40, deadline=None)
@given(tables, st.data())
def test_reorder_moves_rows_and_back(spec, data):
    from minidist.parallel.ps.keys import reorder

    layout = KeyLayout(spec)
    keys = np.array(data.draw(st.lists(st.integers(0, layout.num_keys - 1), unique=True,
                                       min_size=1)), np.int64)
    rows = np.arange(layout.value_count(keys), dtype=np.float64)
    order = np.argsort(keys, kind="stable")
    moved = reorder(layout, keys, order, rows)
    np.testing.assert_array_equal(moved, rows[gather_index(layout, keys, order)])
    np.testing.assert_array_equal(reorder(layout, keys, order, moved, back=True), rows)
