# Names vulture (make lint) finds no use of, used where it cannot see: by a framework, a template,
# the wire format or data files. vulture only parses this file; `_` stands for any object.
# ruff: noqa
# fmt: off

# pydantic fields: the CRD's schema and status (written and read on the wire)
model_count, optional, divisor, output_tokens_per_second, output_tokens_per_second_per_gpu, speed_source, speed_source_reason
# pydantic fields of spec.model.config: the config.json keys accepted (validated here, read as a dict)
q_group_size, weight_block_size, zero_point, config_groups, architectures, num_hidden_layers, n_layer
num_key_value_heads, multi_query_group_num, kv_channels, ffn_hidden_size, padded_vocab_size
seq_length, max_sequence_length, num_experts, num_local_experts, n_shared_experts, text_config
x_linear_attention_layers, x_indexer_cache_layers, x_indexer_key_pool, indexer_types

# kopf: DiffBaseStorage's signature (called with keywords), the settings it reads
extra_fields, essence
_.server_timeout, _.client_timeout, _.connect_timeout, _.inactivity_timeout, _.request_timeout
_.error_backoffs, _.ultimate_exiting_timeout, _.disabled
# logging.LogRecord fields the handlers read; kubernetes.client.Configuration's pool size
_.exc_text, _.levelno, _.connection_pool_maxsize
# read by the Jinja templates (gateway/templates, render/templates)
routing_buffer_bytes, affinity_load_factor, health_check_interval_seconds, fail_timeout_seconds
max_fails, log_requests, hold_keepalive_seconds, _.rate_retry_after_seconds
volume_mounts, termination_grace_period_seconds, startup_period_seconds, startup_failure_threshold
pre_stop_sleep_seconds
# planning: read through operator.attrgetter("capacity_key")
capacity_key
# a load test's per-request end-to-end latency: recorded with each sample, the knee reads TTFT and ITL
latency_s

# tests: pytest's hook signature; http.server and socketserver settings; fields and counters
# the emulators read through getattr; vLLM's objects the probe sets
call, client_address, request_queue_size, disable_nagle_algorithm, protocol_version
utilisation, memory_used_mib, power_watts, temperature_celsius, generation_tokens, _.generation_tokens
_._current_platform, _.skip_tokenizer_init
