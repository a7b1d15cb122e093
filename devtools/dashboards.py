"""The chart's Grafana dashboards: fleet, one deployment, GPUs, gateway, operator.

Each dashboard is first a small typed description (``View``: rows of ``Graph``s, each graph a few
PromQL ``Query``s), then built into Grafana's dashboard model with grafana-foundation-sdk (Grafana's
own typed builders, so the JSON has the fields and defaults Grafana's schema gives it).
``python -m devtools monitoring dashboards`` writes one JSON file per dashboard into the chart's
``monitoring/dashboards/``; the chart puts each into a ConfigMap labelled ``grafana_dashboard: "1"``,
which kube-prometheus-stack's Grafana sidecar loads.

Every dashboard has a Prometheus data-source variable; the deployment dashboard selects a
GLMDeployment by ``namespace`` and ``name`` and reads its vLLM series by the ``model_name`` the
operator's info series gives (``devtools.series``).

grafana-foundation-sdk is a generation-time dependency (the ``test`` extra), not the operator's:
only ``python -m devtools monitoring dashboards`` imports this module.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from grafana_foundation_sdk.builders import dashboard as gdash
from grafana_foundation_sdk.builders import prometheus as gprom
from grafana_foundation_sdk.builders import stat as gstat
from grafana_foundation_sdk.builders import timeseries as gts
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as gmodel

from devtools import series as s

DATASOURCE = gmodel.DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "$__rate_interval"
TAGS = ["glm-operator"]


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Graph:
    title: str
    queries: tuple[Query, ...]
    unit: str = "short"
    description: str = ""
    kind: str = "timeseries"  # or "stat": one number
    width: int = 12


@dataclass(frozen=True)
class Variable:
    name: str
    label: str
    query: str  # label_values(...)
    hidden: bool = False


@dataclass(frozen=True)
class View:
    uid: str
    title: str
    description: str
    rows: tuple[tuple[str, tuple[Graph, ...]], ...]
    variables: tuple[Variable, ...] = field(default_factory=tuple)

    def queries(self) -> list[str]:
        return [q.expr for _, graphs in self.rows for g in graphs for q in g.queries]


def _q(expr: str, legend: str = "") -> Query:
    return Query(expr, legend)


def _quantiles(bucket: str, selector: str, quantiles: Sequence[float]) -> tuple[Query, ...]:
    return tuple(
        _q(
            f"histogram_quantile({q}, sum by (le) (rate({bucket}{{{selector}}}[{RATE}])))",
            f"p{round(q * 100)}",
        )
        for q in quantiles
    )


_NS = 'namespace=~"$namespace"'
_DEPLOYMENT = 'namespace=~"$namespace", name=~"$name"'
_VLLM = 'namespace=~"$namespace", model_name=~"$model_name"'
_NS_VAR = Variable("namespace", "Namespace", f"label_values({s.OP_INFO}, namespace)")
_NAME_VAR = Variable("name", "GLMDeployment", f"label_values({s.OP_INFO}{{{_NS}}}, name)")
_MODEL_VAR = Variable(
    "model_name",
    "Served model",
    f"label_values({s.OP_INFO}{{{_DEPLOYMENT}}}, model_name)",
    hidden=True,
)

FLEET = View(
    uid="glm-fleet",
    title="GLM / Fleet",
    description="Every GLMDeployment: replicas desired and ready, phase, queues, GPUs in use by type.",
    variables=(_NS_VAR,),
    rows=(
        (
            "GLMDeployments",
            (
                Graph(
                    "GLMDeployments",
                    (_q(f"count(max by (namespace, name) ({s.OP_INFO}{{{_NS}}}))"),),
                    kind="stat",
                    width=6,
                ),
                Graph(
                    "Not Ready",
                    (
                        _q(
                            f'count(max by (namespace, name) ({s.OP_PHASE}{{{_NS}, phase!="Ready"}}) == 1) '
                            "or vector(0)"
                        ),
                    ),
                    kind="stat",
                    width=6,
                    description="GLMDeployments whose status.phase is not Ready.",
                ),
                Graph(
                    "GPUs in use by type",
                    (
                        _q(
                            "sum by (gpu_product) "
                            f"(max by (namespace, name, gpu_product) ({s.OP_PLANNED_GPUS}{{{_NS}}}))",
                            "{{gpu_product}}",
                        ),
                    ),
                    description="GPUs the placed replicas take: replicas x GPUs per replica, from the plans.",
                ),
            ),
        ),
        (
            "Replicas and phase",
            (
                Graph(
                    "Replicas: desired and ready",
                    (
                        _q(
                            f"max by (namespace, name) ({s.OP_DESIRED}{{{_NS}}})",
                            "{{namespace}}/{{name}} desired",
                        ),
                        _q(
                            f"max by (namespace, name) ({s.OP_READY}{{{_NS}}})",
                            "{{namespace}}/{{name}} ready",
                        ),
                    ),
                ),
                Graph(
                    "Phase",
                    (
                        _q(
                            f"max by (namespace, name, phase) ({s.OP_PHASE}{{{_NS}}}) == 1",
                            "{{namespace}}/{{name}}: {{phase}}",
                        ),
                    ),
                    description="status.phase of each GLMDeployment over time.",
                ),
                Graph(
                    "Requests waiting",
                    (
                        _q(
                            f"sum by (namespace, model_name) ({s.VLLM_WAITING}{{{_NS}}})",
                            "{{namespace}}/{{model_name}}",
                        ),
                    ),
                ),
                Graph(
                    "Requests running",
                    (
                        _q(
                            f"sum by (namespace, model_name) ({s.VLLM_RUNNING}{{{_NS}}})",
                            "{{namespace}}/{{model_name}}",
                        ),
                    ),
                ),
            ),
        ),
    ),
)

DEPLOYMENT = View(
    uid="glm-deployment",
    title="GLM / Deployment",
    description="One GLMDeployment: queue, latency, throughput, KV cache against its plan, autoscaling.",
    variables=(_NS_VAR, _NAME_VAR, _MODEL_VAR),
    rows=(
        (
            "Requests",
            (
                Graph(
                    "Requests running and waiting",
                    (
                        _q(f"sum({s.VLLM_RUNNING}{{{_VLLM}}})", "running"),
                        _q(f"sum({s.VLLM_WAITING}{{{_VLLM}}})", "waiting"),
                    ),
                ),
                Graph(
                    "Tokens per second",
                    (
                        _q(f"sum(rate({s.VLLM_PROMPT_TOKENS}{{{_VLLM}}}[{RATE}]))", "prompt"),
                        _q(f"sum(rate({s.VLLM_GENERATION_TOKENS}{{{_VLLM}}}[{RATE}]))", "generation"),
                    ),
                ),
                Graph(
                    "Time to first token", _quantiles(s.VLLM_TTFT_BUCKET, _VLLM, (0.5, 0.95, 0.99)), unit="s"
                ),
                Graph(
                    "Inter-token latency", _quantiles(s.VLLM_ITL_BUCKET, _VLLM, (0.5, 0.95, 0.99)), unit="s"
                ),
            ),
        ),
        (
            "KV cache",
            (
                Graph(
                    "KV-cache usage per pod",
                    (_q(f"max by (pod) ({s.VLLM_KV_CACHE_USAGE}{{{_VLLM}}})", "{{pod}}"),),
                    unit="percentunit",
                    description="Above 95 % for 5 minutes raises GLMDeploymentKVCacheFull.",
                ),
                Graph(
                    "Preemptions per second",
                    (_q(f"sum by (pod) (rate({s.VLLM_PREEMPTIONS}{{{_VLLM}}}[{RATE}]))", "{{pod}}"),),
                ),
                Graph(
                    "KV-cache tokens: planned, reported by vLLM, in use",
                    (
                        _q(
                            f"max by (gpu_product) ({s.OP_PLANNED_KV}{{{_DEPLOYMENT}}})",
                            "planned per replica ({{gpu_product}})",
                        ),
                        _q(
                            f"max by (gpu_product) ({s.OP_REPORTED_KV}{{{_DEPLOYMENT}}})",
                            "reported by vLLM, fewest of the pods ({{gpu_product}})",
                        ),
                        _q(
                            f"max by (pod) ({s.VLLM_KV_CACHE_USAGE}{{{_VLLM}}}) "
                            f"* scalar(max({s.OP_PLANNED_KV}{{{_DEPLOYMENT}}}))",
                            "in use {{pod}} (usage x planned)",
                        ),
                    ),
                    description="The plan's KV tokens per replica (status.plan kvCacheTokens); the "
                    "tokens vLLM reports (the labels of vllm:cache_config_info, read by the operator "
                    "from Prometheus; the fewest over the pods of each GPU type); and vLLM's usage. "
                    "Reported more than 10 % off the plan for 15 minutes raises GLMKVCacheTokensOffPlan.",
                ),
            ),
        ),
        (
            "Replicas and autoscaler",
            (
                Graph(
                    "Replicas: desired, ready, most",
                    (
                        _q(f"max({s.OP_DESIRED}{{{_DEPLOYMENT}}})", "desired"),
                        _q(f"max({s.OP_READY}{{{_DEPLOYMENT}}})", "ready"),
                        _q(f"max({s.OP_MAX}{{{_DEPLOYMENT}}})", "most"),
                    ),
                ),
                Graph(
                    "Planned replicas by GPU type",
                    (
                        _q(
                            f"max by (gpu_product) ({s.OP_PLANNED_REPLICAS}{{{_DEPLOYMENT}}})",
                            "{{gpu_product}}",
                        ),
                    ),
                ),
                Graph(
                    "Autoscaler decisions",
                    (
                        _q(
                            "sum by (direction) "
                            f"(increase({s.OP_AUTOSCALER_DECISIONS}{{{_DEPLOYMENT}}}[{RATE}]))",
                            "{{direction}}",
                        ),
                    ),
                ),
                Graph(
                    "Waiting requests the autoscaler saw",
                    (_q(f"max({s.OP_OBSERVED_WAITING}{{{_DEPLOYMENT}}})", "waiting"),),
                ),
            ),
        ),
    ),
)

_FB_USED = s.with_gpu_product(f"{s.DCGM_FB_USED}{{{_NS}}}")

GPUS = View(
    uid="glm-gpus",
    title="GLM / GPUs",
    description="NVIDIA DCGM exporter's GPU series: utilisation, memory used against the plan, power, "
    "temperature.",
    variables=(_NS_VAR,),
    rows=(
        (
            "GPUs",
            (
                Graph(
                    "Utilisation",
                    (
                        _q(
                            f"avg by (Hostname, gpu) ({s.DCGM_GPU_UTIL}{{{_NS}}})",
                            "{{Hostname}} GPU {{gpu}}",
                        ),
                    ),
                    unit="percent",
                ),
                Graph(
                    "Memory used and planned",
                    (
                        _q(
                            f"max by (namespace, pod, gpu_product) ({_FB_USED}) * 1048576",
                            "{{namespace}}/{{pod}} ({{gpu_product}})",
                        ),
                        _q(
                            f"max by (namespace, gpu_product) ({s.OP_PLANNED_GPU_MEMORY}{{{_NS}}})",
                            "planned {{namespace}} {{gpu_product}}",
                        ),
                    ),
                    unit="bytes",
                    description="A GPU holding more than 105 % of the plan's share for 10 minutes raises "
                    "GLMGPUMemoryAbovePlan.",
                ),
                Graph(
                    "Power",
                    (
                        _q(
                            f"avg by (Hostname, gpu) ({s.DCGM_POWER}{{{_NS}}})",
                            "{{Hostname}} GPU {{gpu}}",
                        ),
                    ),
                    unit="watt",
                ),
                Graph(
                    "Temperature",
                    (
                        _q(
                            f"max by (Hostname, gpu) ({s.DCGM_TEMP}{{{_NS}}})",
                            "{{Hostname}} GPU {{gpu}}",
                        ),
                    ),
                    unit="celsius",
                ),
            ),
        ),
    ),
)

GATEWAY = View(
    uid="glm-gateway",
    title="GLM / Gateway",
    description="The GLMGateway's HAProxy: request rate, answers by class and model, per-key 429s, "
    "upstream choice.",
    rows=(
        (
            "Traffic",
            (
                Graph(
                    "Requests per model (backend)",
                    (_q(f"sum by (proxy) (rate({s.HAPROXY_BACKEND_RESPONSES}[{RATE}]))", "{{proxy}}"),),
                    unit="reqps",
                ),
                Graph(
                    "Answers by class (all routes)",
                    (
                        _q(
                            f'sum by (code) (rate({s.HAPROXY_FRONTEND_RESPONSES}{{proxy="openai"}}[{RATE}]))',
                            "{{code}}",
                        ),
                    ),
                    unit="reqps",
                    description="401 (no or unknown key) and 429 (limits) are 4xx the proxy answers itself.",
                ),
                Graph(
                    "5xx per model",
                    (
                        _q(
                            f'sum by (proxy) (rate({s.HAPROXY_BACKEND_RESPONSES}{{code="5xx"}}[{RATE}]))',
                            "{{proxy}}",
                        ),
                    ),
                    unit="reqps",
                ),
                Graph(
                    "Upstream choice: sessions per pod",
                    (
                        _q(
                            f"sum by (proxy, server) (rate({s.HAPROXY_SERVER_SESSIONS}[{RATE}]))",
                            "{{proxy}} {{server}}",
                        ),
                    ),
                    unit="reqps",
                ),
            ),
        ),
        (
            "API keys",
            (
                Graph(
                    "Requests per key",
                    (_q(f"sum by (client) (rate({s.GATEWAY_CLIENT_REQUESTS}[{RATE}]))", "{{client}}"),),
                    unit="reqps",
                ),
                Graph(
                    "429 per key",
                    (_q(f"sum by (client) (rate({s.GATEWAY_CLIENT_REJECTED}[{RATE}]))", "{{client}}"),),
                    unit="reqps",
                ),
            ),
        ),
    ),
)

OPERATOR = View(
    uid="glm-operator",
    title="GLM / Operator",
    description="The operator itself: reconciles and their errors, work queue, leadership, API requests.",
    rows=(
        (
            "Reconciles",
            (
                Graph(
                    "Reconciles by result",
                    (_q(f"sum by (result) (rate({s.OP_RECONCILES}[{RATE}]))", "{{result}}"),),
                    unit="ops",
                ),
                Graph(
                    "Reconcile duration",
                    (
                        _q(
                            "histogram_quantile(0.95, sum by (le) "
                            f"(rate({s.OP_RECONCILE_SECONDS_BUCKET}[{RATE}])))",
                            "p95",
                        ),
                    ),
                    unit="s",
                ),
                Graph(
                    "Queue wait",
                    (
                        _q(
                            f"histogram_quantile(0.95, sum by (le) (rate({s.OP_QUEUE_WAIT_BUCKET}[{RATE}])))",
                            "p95",
                        ),
                    ),
                    unit="s",
                ),
                Graph(
                    "Keys enqueued by cause",
                    (_q(f"sum by (cause) (rate({s.OP_ENQUEUED}[{RATE}]))", "{{cause}}"),),
                    unit="ops",
                ),
            ),
        ),
        (
            "Leadership and API",
            (
                Graph(
                    "Leader",
                    (_q(f"max by (instance) ({s.OP_LEADER})", "{{instance}}"),),
                    description="1 on the replica holding the Lease.",
                ),
                Graph(
                    "API requests by method",
                    (_q(f"sum by (method) (rate({s.OP_API_REQUESTS}[{RATE}]))", "{{method}}"),),
                    unit="reqps",
                ),
            ),
        ),
    ),
)

VIEWS: tuple[View, ...] = (FLEET, DEPLOYMENT, GPUS, GATEWAY, OPERATOR)


def _panel(graph: Graph) -> Any:
    panel: Any = gstat.Panel() if graph.kind == "stat" else gts.Panel()
    panel = panel.title(graph.title).unit(graph.unit).datasource(DATASOURCE).span(graph.width).height(8)
    if graph.description:
        panel = panel.description(graph.description)
    for index, query in enumerate(graph.queries):
        target = gprom.Dataquery().expr(query.expr).datasource(DATASOURCE).ref_id(chr(ord("A") + index))
        if query.legend:
            target = target.legend_format(query.legend)
        panel = panel.with_target(target)
    return panel


def _variable(variable: Variable) -> gdash.QueryVariable:
    built = (
        gdash.QueryVariable(variable.name)
        .label(variable.label)
        .query(variable.query)
        .datasource(DATASOURCE)
        .refresh(gmodel.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(gmodel.VariableOption(selected=True, text=["All"], value=["$__all"]))
    )
    if variable.hidden:
        built = built.hide(gmodel.VariableHide.HIDE_VARIABLE)
    return built


def build(view: View) -> dict[str, Any]:
    """The dashboard's JSON model (a dict) as Grafana imports it."""
    board = (
        gdash.Dashboard(view.title)
        .uid(view.uid)
        .description(view.description)
        .tags(TAGS)
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("browser")
        .with_variable(gdash.DatasourceVariable("datasource").label("Data source").type("prometheus"))
    )
    for variable in view.variables:
        board = board.with_variable(_variable(variable))
    for row_title, graphs in view.rows:
        board = board.with_row(gdash.Row(row_title))
        for graph in graphs:
            board = board.with_panel(_panel(graph))
    result: dict[str, Any] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return result


def dashboard_files() -> dict[str, str]:
    """``{file name: JSON text}``: one file per dashboard, as in the chart's monitoring/dashboards/."""
    return {f"{view.uid}.json": json.dumps(build(view), indent=2, sort_keys=True) + "\n" for view in VIEWS}
