from collections.abc import Callable
from pathlib import Path

import pytest

from ascend_pd_runtime.model_facts import ModelFacts, load_model_facts
from ascend_pd_runtime.plan_cli import example_config


def deepseek_shaped(layers: int, mtp: int, groups: int) -> ModelFacts:
    """DeepSeek-V3's MLA widths with ``layers`` layers and ``mtp`` MTP layers; 3 buffer
    groups (an index buffer, as in V3.2) or 2."""
    return ModelFacts(
        num_hidden_layers=layers,
        num_nextn_predict_layers=mtp,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        index_head_dim=128 if groups == 3 else None,
    )


def example_facts(example: str) -> Callable[[], ModelFacts]:
    """A fixture: the model facts of ``examples/``' config of ``example``."""

    def facts() -> ModelFacts:
        return load_model_facts(example_config(example))

    return pytest.fixture(facts)


dsv3 = example_facts("deepseek-v3")
dsv32 = example_facts("deepseek-v3.2")
v2lite = example_facts("deepseek-v2-lite")
mha = example_facts("qwen2-7b")


@pytest.fixture
def write_config(tmp_path: Path):
    def write(text: str) -> Path:
        path = tmp_path / "config.json"
        path.write_text(text)
        return path

    return write
