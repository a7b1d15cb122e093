"""GLM-5.2's shared indexer (IndexShare): which layers keep an indexer cache, derived as vLLM derives it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from glm_operator.catalog.models import ModelArchitecture, resolve_model
from glm_operator.cli import main
from glm_operator.planning.memory.kv_cache import kv_bytes_per_token_per_stage
from glm_operator.planning.memory.layers import layer_kinds

CATALOG = Path(__file__).resolve().parents[2] / "operator/glm_operator/catalog/data/models.yaml"


def _catalog_config(model_id: str) -> dict[str, Any]:
    """The config.json facts the catalog keeps for ``model_id``."""
    models = yaml.safe_load(CATALOG.read_text(encoding="utf-8"))["models"]
    return dict(next(m for m in models if m["id"] == model_id)["config"])


def _glm52_config(layers: int, **extra: Any) -> dict[str, Any]:
    return {**_catalog_config("zai-org/GLM-5.2"), "num_hidden_layers": layers, **extra}


def _indexer_layers(config: dict[str, Any]) -> list[int]:
    kinds = layer_kinds(ModelArchitecture.from_hf_config(config))
    return [i for i, (_, has_indexer) in enumerate(kinds) if has_indexer]


# vLLM 0.33 (deepseek_v2.py L1139-1168): a layer builds its indexer unless
# max(layer - index_skip_topk_offset + 1, 0) % index_topk_freq != 0, offset 2 by default
@pytest.mark.parametrize(
    ("layers", "expected"),
    [
        (5, [0, 1]),
        (6, [0, 1, 5]),
        (8, [0, 1, 5]),
        (78, [0, 1, *range(5, 78, 4)]),
    ],
)
def test_glm52_indexer_layers_follow_vllms_rule_at_any_layer_count(layers: int, expected: list[int]) -> None:
    assert _indexer_layers(_glm52_config(layers)) == expected


def test_the_full_model_keeps_21_indexer_caches_and_glm5_one_per_layer() -> None:
    assert len(_indexer_layers(_glm52_config(78))) == 21
    assert len(_indexer_layers(_catalog_config("zai-org/GLM-5"))) == 78
    assert len([k for k in layer_kinds(resolve_model("zai-org/GLM-5.2").architecture) if k[1]]) == 21


def test_offset_and_pattern_are_read_as_vllm_reads_them() -> None:
    assert _indexer_layers(_glm52_config(8, index_skip_topk_offset=3)) == [0, 1, 2, 6]
    assert _indexer_layers(_glm52_config(4, index_topk_pattern="FSFS")) == [0, 2]
    # a pattern shorter than the model: the layers past it build their indexer
    assert _indexer_layers(_glm52_config(4, index_topk_pattern="SS")) == [2, 3]


def test_kv_bytes_per_token_count_only_the_indexer_layers() -> None:
    arch = ModelArchitecture.from_hf_config(_glm52_config(6))
    # fp8_ds_mla record 656 B on every layer, a 132 B indexer key on layers 0, 1 and 5
    assert kv_bytes_per_token_per_stage(arch, 8, 1, "fp8") == (6 * 656 + 3 * 132,)
    # pipeline stages hold the indexers of their own layers: 0-2 (0, 1) and 3-5 (5)
    assert kv_bytes_per_token_per_stage(arch, 8, 2, "fp8") == (3 * 656 + 2 * 132, 3 * 656 + 132)


def test_estimate_of_a_cut_config_json_plans_vllms_indexer_caches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_glm52_config(5)))
    rc = main(["estimate", "--model", str(path), "--gpu", "H200", "--max-model-len", "8192", "-o", "json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    # bf16 KV: (512 + 64) x 2 B on 5 layers, 132 B on the two indexer layers
    assert out["kv_cache_bytes_per_token_per_gpu"] == 5 * 1152 + 2 * 132
