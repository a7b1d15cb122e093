"""Ask the real vLLM package questions; run with the python of the vLLM virtualenv (hack/vllm.sh).

This file is executed as a script by that interpreter, which has vLLM but not glm_operator, so it
imports nothing from glm_operator. It reads one JSON request on stdin and prints one JSON answer:

  {"op": "options"}                 every option of `vllm serve`: option strings (hidden ones too),
                                    dest, action class, nargs, type, whether it takes JSON
  {"op": "parse", "argvs": [[...]]} parse each argv (the args after `vllm serve`) with vLLM's own
                                    parser; per argv: ok, error, and the parsed values of interest
  {"op": "changed", "argvs": [[...]]} per argv after a model: accepted, and the dests it changes
  {"op": "registry", "archs": [..]} which architectures vLLM's model registry serves
  {"op": "parsers", ...}            registered tool-call and reasoning parser names
  {"op": "engine", "cases": [...]}  build vLLM's ModelConfig/ParallelConfig/CacheConfig from
                                    EngineArgs for a config.json written to a temp dir, on CPU
  {"op": "metrics", "argv": [...], "config": {...}, "names": [...]}
                                    build vLLM's Prometheus stat logger for that engine config and
                                    return the label sets of the named series it registers;
                                    "cache_config": {...} also logs the initialised engine
                                    (vllm:cache_config_info) with those CacheConfig fields set

vLLM picks its platform (CUDA, ROCm, CPU, ...) on first use; on a machine without GPUs the
detection may fail or pick nothing. The CPU platform is forced before anything builds the parser.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")


def force_cpu_platform() -> None:
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()


def serve_parser() -> argparse.ArgumentParser:
    force_cpu_platform()
    from vllm.entrypoints.cli.serve import ServeSubcommand

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older layouts
        from vllm.utils import FlexibleArgumentParser

    root = FlexibleArgumentParser(prog="vllm")
    subparsers = root.add_subparsers(dest="subparser")
    parser: argparse.ArgumentParser = ServeSubcommand().subparser_init(subparsers)
    return parser


def _options(parser: argparse.ArgumentParser) -> dict[str, Any]:
    # Every string the parser accepts for an action: vLLM hides some from the action's own list
    # (--no-enable-x beside --disable-x) but keeps them registered.
    registered: dict[int, list[str]] = {}
    for string, registered_action in parser._option_string_actions.items():
        registered.setdefault(id(registered_action), []).append(string)
    actions = []
    for action in parser._actions:
        actions.append(
            {
                "dest": action.dest,
                "option_strings": list(action.option_strings),
                "hidden_option_strings": sorted(
                    set(registered.get(id(action), [])) - set(action.option_strings)
                ),
                "action": type(action).__name__,
                "nargs": action.nargs
                if isinstance(action.nargs, (int, str)) or action.nargs is None
                else None,
                "type": getattr(action.type, "__name__", None),
                "json": _takes_json(action),
                "choices": [str(c) for c in action.choices] if action.choices else None,
            }
        )
    import vllm

    return {"version": vllm.__version__, "allow_abbrev": bool(parser.allow_abbrev), "actions": actions}


def _takes_json(action: argparse.Action) -> bool:
    """Whether the option's value is JSON: its type turns '{}' into an object (a dict, a config)."""
    if action.type is None or not callable(action.type):
        return False
    try:
        value = action.type("{}")
    except Exception:
        return False
    return value is not None and not isinstance(value, (str, int, float, bool))


_INTERESTING = (
    "model_tag",
    "model",
    "served_model_name",
    "revision",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "decode_context_parallel_size",
    "speculative_config",
    "max_num_batched_tokens",
    "max_model_len",
    "gpu_memory_utilization",
    "max_num_seqs",
    "quantization",
    "kv_cache_dtype",
    "dtype",
    "load_format",
    "port",
    "host",
    "enable_expert_parallel",
    "trust_remote_code",
    "tool_call_parser",
    "reasoning_parser",
    "enable_auto_tool_choice",
    "distributed_executor_backend",
)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


def _parse(parser: argparse.ArgumentParser, argvs: list[list[str]]) -> list[dict[str, Any]]:
    results = []
    for argv in argvs:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                ns = parser.parse_args(argv)
        except SystemExit:
            results.append({"ok": False, "error": err.getvalue().strip().splitlines()[-1:] or ["?"]})
            continue
        except Exception as exc:  # vLLM validators raise ValueError etc.
            results.append({"ok": False, "error": [f"{type(exc).__name__}: {exc}"]})
            continue
        values = {k: _jsonable(getattr(ns, k)) for k in _INTERESTING if hasattr(ns, k)}
        results.append({"ok": True, "values": values})
    return results


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


def _changed(parser: argparse.ArgumentParser, argvs: list[list[str]]) -> list[dict[str, Any]]:
    """Per argv (after the model): whether vLLM accepts it, and which destinations it sets.

    Every action's default is replaced by a marker first, so a destination set to a value that
    happens to equal vLLM's default still shows as set.
    """
    unset = _Unset()
    for action in parser._actions:
        if action.dest != "help":
            action.default = unset
    results = []
    for argv in argvs:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                ns = vars(parser.parse_args(["m", *argv]))
        except (SystemExit, Exception):
            results.append({"ok": False, "changed": []})
            continue
        changed = sorted(k for k, v in ns.items() if v is not unset and k != "model_tag")
        results.append({"ok": True, "changed": changed})
    return results


def _registry(archs: list[str]) -> dict[str, bool]:
    force_cpu_platform()
    from vllm.model_executor.models import ModelRegistry

    supported = set(ModelRegistry.get_supported_archs())
    return {arch: arch in supported for arch in archs}


def _parsers() -> dict[str, list[str]]:
    force_cpu_platform()
    out: dict[str, list[str]] = {}
    try:
        from vllm.tool_parsers import ToolParserManager
    except ImportError:
        from vllm.entrypoints.openai.tool_parsers import ToolParserManager
    try:
        from vllm.reasoning import ReasoningParserManager
    except ImportError:  # pragma: no cover
        ReasoningParserManager = None
    out["tool_call_parsers"] = sorted(_registered(ToolParserManager))
    out["reasoning_parsers"] = sorted(_registered(ReasoningParserManager)) if ReasoningParserManager else []
    return out


def _registered(manager: Any) -> set[str]:
    names: set[str] = set()
    for attr in ("tool_parsers", "reasoning_parsers", "lazy_parsers", "_lazy_parsers"):
        value = getattr(manager, attr, None)
        if isinstance(value, dict):
            names.update(str(k) for k in value)
    if not names and hasattr(manager, "list_registered"):
        names.update(str(n) for n in manager.list_registered())
    return names


def _engine(parser: argparse.ArgumentParser, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each case {"argv", "config"}: write config.json, parse argv with the model path replaced
    by that directory, build vLLM's engine configs that need no GPU, report what was checked."""
    from vllm.engine.arg_utils import EngineArgs

    results = []
    for case in cases:
        checks: list[str] = []
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
                json.dump(case["config"], f)
            argv = [tmp, *case["argv"][1:]]
            try:
                ns = parser.parse_args(argv)
                ns.model = tmp
                ns.skip_tokenizer_init = True
                engine_args = EngineArgs.from_cli_args(ns)
                model_config = engine_args.create_model_config()
                checks.append("model_config")
                if model_config.max_model_len != ns.max_model_len:
                    raise ValueError(f"max_model_len became {model_config.max_model_len}")
                checks.append("max_model_len")
                parallel = (
                    engine_args.create_parallel_config()
                    if hasattr(engine_args, "create_parallel_config")
                    else None
                )
                if parallel is None:
                    from vllm.config import ParallelConfig

                    parallel = ParallelConfig(
                        tensor_parallel_size=ns.tensor_parallel_size,
                        pipeline_parallel_size=ns.pipeline_parallel_size,
                    )
                model_config.verify_with_parallel_config(parallel)
                checks.append("parallel")
                if ns.kv_cache_dtype:
                    from vllm.config import CacheConfig

                    CacheConfig(block_size=16, cache_dtype=ns.kv_cache_dtype)
                    checks.append("kv_cache_dtype")
            except Exception as exc:
                results.append(
                    {"ok": False, "checks": checks, "error": f"{type(exc).__name__}: {exc}"[:2000]}
                )
                continue
        results.append({"ok": True, "checks": checks})
    return results


def _metrics(parser: argparse.ArgumentParser, request: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    """The labels vLLM's own Prometheus logger puts on the named series (the autoscaler's input).
    With ``cache_config`` (CacheConfig fields the engine sets after profiling, e.g. num_gpu_blocks)
    the logger also logs the initialised engine, as vLLM's server does: vllm:cache_config_info."""
    import prometheus_client
    from vllm.config import VllmConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
            json.dump(request["config"], f)
        ns = parser.parse_args([tmp, *request["argv"][1:]])
        ns.model = tmp
        ns.skip_tokenizer_init = True
        model_config = EngineArgs.from_cli_args(ns).create_model_config()
        vllm_config = VllmConfig(model_config=model_config)
        # What the engine sets once its KV cache is allocated; then the info gauge is logged.
        for name, value in (request.get("cache_config") or {}).items():
            setattr(vllm_config.cache_config, name, value)
        stat_logger = PrometheusStatLogger(vllm_config, [0])
        if request.get("cache_config"):
            stat_logger.log_engine_initialized()
    found: dict[str, list[dict[str, str]]] = {name: [] for name in request["names"]}
    for metric in prometheus_client.REGISTRY.collect():
        for sample in metric.samples:
            if sample.name in found:
                found[sample.name].append(dict(sample.labels))
    return found


def main() -> int:
    request = json.load(sys.stdin)
    op = request["op"]
    out: Any
    with contextlib.redirect_stdout(sys.stderr):  # vLLM may print on import
        if op == "options":
            out = _options(serve_parser())
        elif op == "parse":
            out = _parse(serve_parser(), request["argvs"])
        elif op == "changed":
            out = _changed(serve_parser(), request["argvs"])
        elif op == "registry":
            out = _registry(request["archs"])
        elif op == "parsers":
            out = _parsers()
        elif op == "engine":
            out = _engine(serve_parser(), request["cases"])
        elif op == "metrics":
            out = _metrics(serve_parser(), request)
        else:
            raise SystemExit(f"unknown op {op!r}")
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
