"""What the operator derives from the metrics it reads.

``kv_cache`` turns the labels of vLLM's ``vllm:cache_config_info`` into the KV tokens the operator
exports next to the planned ones (PromQL cannot read a label as a number). The chart's alerts and
dashboards, and the metric names they read, are generated outside the package (``devtools``).
"""
