"""The parameter server's key space: ranges, routing indexes, flattening, bad keys."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidist.parallel.ps import KeyLayout
from minidist.parallel.ps.keys import common_width, gather_index
from minidist.parallel.ps.messages import HEADER_BYTES, Header, Kind, unpack
from minidist.parallel.ps.plans import LastKeys, Route

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


def test_rows_of_one_width_are_indexed_as_rows():
    layout = KeyLayout({"bias": (2, 3), "emb": (6, 4)})
    base = layout.first_key["emb"]
    assert common_width(layout.widths[base:]) == 4 and common_width(layout.widths) == 1
    values = np.arange(layout.num_values)
    rows = values[layout.offsets[base]:].reshape(-1, 4)  # a server's shard, as rows
    keys = np.array([7, 3, 5])
    np.testing.assert_array_equal(rows[layout.value_index(keys, base, width=4)].ravel(),
                                  values[layout.value_index(keys)])
    assert layout.value_index(np.arange(3, 6), base, width=4) == slice(1, 4)


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
    header = Header(Kind.PUSH, clock=7, keys=2, values=5, version=3, timestamp=0.25)
    message = np.zeros(HEADER_BYTES + 8, np.uint8)
    header.write(message)
    assert Header.read(message) == header
    layout = KeyLayout({"a": (4, 2), "b": (6, 1)})  # keys 2 and 9: rows of 2 and 1 values
    route = Route(layout, [(0, layout.num_keys)], np.array([9, 2]))
    values = np.arange(3, dtype=np.float32)  # key 9's row, then key 2's
    payload = np.empty(header.payload_bytes(4) - 2 * 4, np.uint8)
    got_keys, got_values = unpack(route.pack_push(route.parts[0], values, payload), 2,
                                  np.dtype(np.float32))
    np.testing.assert_array_equal(got_keys, [9, 2])  # one server: the caller's order
    np.testing.assert_array_equal(got_values, [0, 1, 2])
    assert header.payload_bytes(4) == 2 * 8 + 5 * 4


def test_split_by_load_gives_popular_keys_narrower_ranges():
    layout = KeyLayout({"ids": (100, 4)})
    load = 1.0 / np.arange(1, 101)  # Zipf: key 0 is requested most
    ranges = layout.split(4, load)
    sizes = [end - first for first, end in ranges]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    shares = [load[first:end].sum() / load.sum() for first, end in ranges]
    assert max(shares) < 0.25 + load[0] / load.sum()  # within one key of 1/S
    with pytest.raises(ValueError, match="one finite weight >= 0 per key"):
        layout.split(2, np.ones(3))
    with pytest.raises(ValueError, match="one finite weight >= 0 per key"):
        layout.split(2, np.where(np.arange(100) == 7, np.nan, 1.0))  # once a meaningless cut


@settings(max_examples=60, deadline=None)
@given(tables, st.integers(1, 4), st.data())
def test_a_route_packs_each_servers_rows_in_the_callers_order_and_assembles_them_back(
        spec, servers, data):
    layout = KeyLayout(spec)
    ranges = layout.split(min(servers, layout.num_keys))
    keys = np.array(data.draw(st.lists(st.integers(0, layout.num_keys - 1), unique=True)),
                    np.int64)
    route = Route(layout, ranges, keys)
    rows = np.arange(layout.value_count(keys), dtype=np.float64)  # in the order of keys
    ends = np.cumsum(layout.widths[keys]).tolist()
    by_key = {k: rows[end - layout.widths[k]:end]
              for k, end in zip(keys.tolist(), ends, strict=True)}
    answers = []
    for part, (first, end) in zip(route.parts, ranges, strict=True):
        assert part.keys.tolist() == [k for k in keys.tolist() if first <= k < end]
        payload = np.empty(8 * part.keys.size + 8 * part.count, np.uint8)
        got_keys, got_rows = unpack(route.pack_push(part, rows, payload), part.keys.size,
                                    np.dtype(np.float64))
        expected = [by_key[k] for k in part.keys.tolist()]
        np.testing.assert_array_equal(got_rows, np.concatenate([np.empty(0), *expected]))
        answers.append(got_rows.copy())  # a server answers a pull with its rows, same order
    np.testing.assert_array_equal(route.assemble(answers), rows)


def test_the_last_keys_memo_rebuilds_when_the_keys_change():
    built = []
    memo = LastKeys(lambda keys: built.append(keys.tolist()) or len(built))
    keys = np.array([3, 1, 2])
    assert memo(keys) == memo(np.array([3, 1, 2])) == 1
    keys[0] = 0  # the caller's array changed in place: a new key set
    assert memo(keys) == 2 and memo(keys.astype(np.int32)) == 3
    assert built == [[3, 1, 2], [0, 1, 2], [0, 1, 2]]
