"""PP layer partition: which target layers each pipeline stage owns.

Identical to SGLang's rule, because prefill and decode must agree with the
model runner that actually loads the layers: L // pp layers per rank, the
L % pp leftover layers one each to the last ranks. An explicit partition has the
semantics of ``SGLANG_PP_LAYER_PARTITION`` (length pp, entries >= 1, sum L).
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import BadInput


def layer_partition(
    num_layers: int, pp: int, explicit: Sequence[int] | None = None
) -> list[tuple[int, int]]:
    """Return ``[(start_layer, end_layer), ...]`` (end exclusive) for every PP rank."""
    if isinstance(pp, bool) or not isinstance(pp, int) or pp < 1:
        raise BadInput(f"pipeline size {pp!r} is invalid: it must be an integer >= 1")
    if pp > num_layers:
        raise BadInput(
            f"pipeline size {pp} is invalid: it must not exceed the model's "
            f"{num_layers} layers (every stage needs at least one layer)"
        )
    if explicit is not None and len(explicit) > 0:
        sizes = list(explicit)
        if len(sizes) != pp:
            raise BadInput(
                f"layer partition {format_partition(sizes)} is invalid: it has {len(sizes)} "
                f"entries but the pipeline size is {pp}"
            )
        if any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes):
            raise BadInput(
                f"layer partition {format_partition(sizes)} is invalid: every entry must be "
                "an integer >= 1"
            )
        if sum(sizes) != num_layers:
            raise BadInput(
                f"layer partition {format_partition(sizes)} is invalid: it sums to "
                f"{sum(sizes)} but the model has {num_layers} layers"
            )
    else:
        base, leftover = divmod(num_layers, pp)
        sizes = [base + (1 if rank >= pp - leftover else 0) for rank in range(pp)]
    ranges = []
    start = 0
    for size in sizes:
        ranges.append((start, start + size))
        start += size
    return ranges


def format_partition(sizes: Sequence[int]) -> str:
    """The ``SGLANG_PP_LAYER_PARTITION`` spelling of a partition: ``30,31``."""
    return ",".join(str(s) for s in sizes)


def parse_partition(text: str) -> list[int]:
    """Parse ``"30,31"``; an empty string means no explicit partition."""
    if not text.strip():
        return []
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise BadInput(
            f"layer partition {text!r} is invalid: expected comma-separated integers like 30,31"
        ) from None
