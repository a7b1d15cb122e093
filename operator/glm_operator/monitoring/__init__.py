"""The metrics the operator and the chart's monitoring read.

``kv_cache`` turns the labels of vLLM's ``vllm:cache_config_info`` into the KV tokens the operator
exports next to the planned ones (PromQL cannot read a label as a number). ``series`` names every
metric the chart's alerts and dashboards read (generated from them by ``devtools``), one place, so
the tests can check each against what the vLLM emulator, the operator, HAProxy and the DCGM
stand-in expose, and against vLLM's own list.
"""
