"""``glm-operator estimate`` and ``glm-operator plan``: tables, JSON keys, one-line errors (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from glm_operator.cli import main

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-cluster.yaml"
# A config.json as a user would pass with --model (a Llama-3-8B-shaped dense GQA model).
LLAMA_LIKE_CONFIG = {
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_estimate_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "estimate",
        "--model",
        "zai-org/GLM-4.5-Air",
        "--gpu",
        "H100",
        "--tensor-parallel-size",
        "4",
        "--max-model-len",
        "32768",
        "--output",
        "json",
    )
    data = json.loads(out)
    assert code == 0 and data["fits"] is True
    for key in (
        "weights_gib_per_gpu",
        "kv_cache_bytes_per_token_per_gpu",
        "available_kv_cache_gib_per_gpu",
        "kv_cache_tokens",
        "max_concurrency",
        "fits",
        "reasons",
    ):
        assert key in data
    assert data["kv_cache_bytes_per_token_per_gpu"] == 47104
    lines = data["vllm_log_lines"]
    assert f"Available KV cache memory: {data['available_kv_cache_gib_per_gpu']:.2f} GiB" in lines
    # vLLM 0.33 logs the size and the concurrency on one line
    assert any(
        line.startswith(f"GPU KV cache size: {data['kv_cache_tokens']:,} tokens, Maximum concurrency")
        for line in lines
    )
    assert any(line.startswith("Total non KV cache memory:") for line in lines)
    assert any("total consumed (from mem_get_info)" in line for line in lines)


def test_estimate_log_lines_use_the_release_wording(capsys: pytest.CaptureFixture[str]) -> None:
    """A vLLM 0.26 plan prints 0.26's profiling line (the wording of a real H200 log in
    benchmarks/gpu_truth/logs) and its two KV-cache lines, not 0.33's."""
    from benchmarks.gpu_truth.cases import LOGS
    from benchmarks.gpu_truth.logparse import read_log

    logged = read_log(LOGS / "glm47-l12-b8k.log.gz")
    code, out, _ = run(
        capsys,
        "estimate",
        "--model",
        "zai-org/GLM-4.7-Flash",
        "--gpu",
        "H200",
        "--max-model-len",
        "32768",
        "--vllm-version",
        "0.26.0",
        "--output",
        "json",
    )
    lines = json.loads(out)["vllm_log_lines"]
    profiling = next(line for line in lines if line.startswith("Total non KV cache memory:"))
    for phrase in ("torch peak memory increase: ", "non-torch forward increase memory: ", "weights memory: "):
        assert phrase in profiling and phrase in logged, phrase
    assert "total consumed" not in profiling and "total consumed" not in logged
    assert any(line.startswith("GPU KV cache size: ") and line.endswith(" tokens") for line in lines)
    assert code == 0


def test_estimate_table_and_config_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_LIKE_CONFIG))
    code, out, _ = run(
        capsys,
        "estimate",
        "--model",
        str(config),
        "--gpu-memory-gib",
        "79.19",
        "--max-model-len",
        "8192",
        "--available-kv-cache-gib",
        "51.63",
    )
    assert code == 0 and "GPU KV cache size: 422,944 tokens" in out
    assert "Available KV cache memory: 51.63 GiB" in out
    assert "Maximum concurrency for 8,192 tokens per request: 51.63x" in out


def test_estimate_not_fitting_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "estimate", "--model", "GLM-4.5-Air", "--gpu", "L4", "--max-model-len", "4096")
    assert code == 1 and "no" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--model", "GLM-9", "--gpu", "H100", "--max-model-len", "4096"], "not in the catalog"),
        (["--model", "GLM-4.5-Air", "--gpu", "TPU", "--max-model-len", "4096"], "GPU 'TPU'"),
        (["--model", "GLM-4.5-Air", "--gpu", "H100", "--max-model-len", "300000"], "131072"),
        (
            ["--model", "GLM-4.7-Flash", "--gpu", "H100", "--tp", "8", "--max-model-len", "4096"],
            "attention heads",
        ),
        (
            ["--model", "/nonexistent/config.json", "--gpu", "H100", "--max-model-len", "4096"],
            "file not found",
        ),
    ],
)
def test_estimate_bad_input_is_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    code, _, err = run(capsys, "estimate", *argv)
    assert code == 2 and needle in err and err.count("\n") == 1 and "Traceback" not in err


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "glmd.yaml"
    path.write_text(text)
    return str(path)


GLMD = """\
apiVersion: inference.glm.dev/v1alpha1
kind: GLMDeployment
metadata: {name: air}
spec:
  model: {id: zai-org/GLM-4.5-Air}
  quantization: bf16
  contextLength: 32768
  replicas: 2
"""


def test_plan_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(
        capsys, "plan", "-f", write(tmp_path, GLMD), "--nodes", str(FIXTURE), "--output", "json"
    )
    data = json.loads(out)
    assert code == 0 and data["fits"] is True
    v = data["variants"][0]
    for key in (
        "gpu_product",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "gpus_per_replica",
        "nodes_per_replica",
        "quantization",
        "weights_gib_per_gpu",
        "kv_cache_tokens",
        "max_concurrency",
        "replicas",
    ):
        assert key in v
    assert all({"gpu_product", "reason"} <= r.keys() for r in data["rejected"])
    assert data["license"] == "MIT"  # the catalog's entry for GLM-4.5-Air


def test_plan_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(capsys, "plan", "-f", write(tmp_path, GLMD), "--nodes", str(FIXTURE))
    assert code == 0 and "NVIDIA-H100-80GB-HBM3" in out and "rejected NVIDIA-L4" in out
    assert out.splitlines()[1] == "licence: MIT"
    assert "output tokens/s per replica" in out  # each variant's predicted speed
    assert "the autoscaler's target per replica" in out  # and its knee
    ranks = [line for line in out.splitlines() if line.startswith("rank ")]
    assert ranks and ranks[0].startswith("rank 1") and sum("(planned)" in r for r in ranks) == 1


def test_plan_no_fit_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = GLMD.replace("zai-org/GLM-4.5-Air", "GLM-5.1").replace("bf16", "fp8")
    text += "  gpu: {products: [H100, A100-80GB]}\n"  # one 8 x 80 GB node is too small
    code, out, _ = run(capsys, "plan", "-f", write(tmp_path, text), "--nodes", str(FIXTURE))
    assert code == 1 and "DOES NOT FIT" in out


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("spec: [unclosed", "malformed YAML"),
        (GLMD.replace("zai-org/GLM-4.5-Air", "nope"), "not in the catalog"),
        (GLMD.replace("32768", "999999"), "contextLength"),
        ("kind: GLMDeployment\nmetadata: {name: x}\n", "no spec"),
    ],
)
def test_plan_bad_input_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, needle: str
) -> None:
    code, _, err = run(capsys, "plan", "-f", write(tmp_path, text), "--nodes", str(FIXTURE))
    assert code == 2 and needle in err and err.count("\n") == 1


def test_plan_missing_nodes_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "plan", "-f", write(tmp_path, GLMD), "--nodes", str(tmp_path / "none.yaml"))
    assert code == 2 and "file not found" in err


def test_plan_validates_the_spec_like_the_apiserver(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "bad.yaml"
    doc.write_text(
        "apiVersion: inference.glm.dev/v1alpha1\nkind: GLMDeployment\nmetadata: {name: x}\n"
        "spec: {model: {id: zai-org/GLM-4.5-Air}, gpu: {memoryUtilization: 0.99}}\n"
    )
    nodes = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-cluster.yaml"
    assert main(["plan", "-f", str(doc), "--nodes", str(nodes)]) == 2
    err = capsys.readouterr().err
    assert "spec.gpu.memoryUtilization" in err and err.count("\n") == 1


def test_plan_prints_the_goodput_comparison_of_auto(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = GLMD.replace("  quantization: bf16\n", "").replace("GLM-4.5-Air", "GLM-4.7-Flash")
    text += "  gpu: {products: [H100]}\n"
    code, out, _ = run(capsys, "plan", "-f", write(tmp_path, text), "--nodes", str(FIXTURE))
    assert code == 0
    lines = out.splitlines()
    head = lines.index(
        "shapes compared on NVIDIA-H100-80GB-HBM3, best first (predicted at each one's max-num-seqs):"
    )
    shapes = [line for line in lines[head + 1 :] if line.startswith("  ")]
    assert shapes[0].startswith("  * fp8 TP=1 ") and shapes[0].endswith("served")
    assert sum(line.startswith("  * ") for line in shapes) == 1
    (simplest,) = [line for line in shapes if "(simplest fit)" in line]
    assert simplest.startswith("    bf16 TP=1 ") and "fewer output tokens/s per GPU" in simplest
    assert "chosen over bf16 TP=1 (the first shape that fits) for throughput" in out
