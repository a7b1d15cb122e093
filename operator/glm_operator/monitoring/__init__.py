"""What a platform team looks at: the chart's Prometheus alerts (``alerts``) and Grafana dashboards
(``dashboards``), generated from Python into the chart (``glm-operator monitoring``, hack/generate.sh).

``kv_cache`` turns the labels of vLLM's ``vllm:cache_config_info`` into the KV tokens the operator
exports next to the planned ones (PromQL cannot read a label as a number). ``series`` names every
metric they read, one place, so the tests can check each against what the
vLLM emulator, the operator, HAProxy and the DCGM stand-in expose, and against vLLM's own list.
"""
