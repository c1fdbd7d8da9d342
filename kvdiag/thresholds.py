"""kvdiag's own load thresholds on vLLM's KV usage, used where signals are derived (:mod:`kvdiag.derive.prefix`,
:mod:`kvdiag.derive.windows`) and where the PromQL reader asks Prometheus for the same quantities
(:mod:`kvdiag.collect.prometheus`) and the rule exporter writes them (:mod:`kvdiag.export`): one definition, below
both, so the reader never imports the derive layer. Ratios 0-1 of ``vllm:kv_cache_usage_perc``."""

LOW_LOAD = 0.50
"""kv_cache_usage below this: the pool had room, cached prefixes were rarely evicted."""
HIGH_LOAD = 0.80
"""kv_cache_usage at or above this: allocations consume the free queue, cached prefixes are recycled."""
MIN_SHARE = 0.10
"""Each side of the load split needs at least this share of the window's prefix-cache queries."""
HIGH_USAGE = 0.95
"""kv_cache_usage at or above this counts as time at a full pool (``kv_cache_usage_high_seconds``; vLLM 0.33's
admission needs a free block per running request plus the next chunk, so a pool this full queues or preempts)."""
