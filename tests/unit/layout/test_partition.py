import pytest

from ascend_pd_runtime.errors import BadInput
from ascend_pd_runtime.partition import layer_partition, parse_partition


@pytest.mark.parametrize(
    ("layers", "pp", "expected"),
    [
        (61, 1, [(0, 61)]),
        (61, 2, [(0, 30), (30, 61)]),
        (61, 4, [(0, 15), (15, 30), (30, 45), (45, 61)]),
        (10, 4, [(0, 2), (2, 4), (4, 7), (7, 10)]),
        (27, 3, [(0, 9), (9, 18), (18, 27)]),
        (5, 5, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]),
    ],
)
def test_even_partition_gives_leftovers_to_last_ranks(layers, pp, expected):
    assert layer_partition(layers, pp) == expected


def test_explicit_partition_overrides():
    assert layer_partition(61, 2, [31, 30]) == [(0, 31), (31, 61)]
    assert layer_partition(61, 3, [1, 1, 59]) == [(0, 1), (1, 2), (2, 61)]


def test_empty_explicit_partition_means_even():
    assert layer_partition(61, 2, []) == [(0, 30), (30, 61)]


@pytest.mark.parametrize(
    ("pp", "partition", "message"),
    [
        (2, [61], "has 1 entries but the pipeline size is 2"),
        (2, [30, 30], "sums to 60 but the model has 61 layers"),
        (2, [0, 61], "every entry must be an integer >= 1"),
        (2, [-1, 62], "every entry must be an integer >= 1"),
        (0, None, "pipeline size 0 is invalid: it must be an integer >= 1"),
        (-2, None, "pipeline size -2 is invalid"),
        (62, None, "must not exceed the model's 61 layers"),
    ],
)
def test_bad_partitions(pp, partition, message):
    with pytest.raises(BadInput, match=message):
        layer_partition(61, pp, partition)


def test_parse_partition():
    assert parse_partition("30,31") == [30, 31]
    assert parse_partition("") == []
    with pytest.raises(BadInput, match="expected comma-separated integers"):
        parse_partition("30;31")
