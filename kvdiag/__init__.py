"""kvdiag: diagnose KV-cache and GPU-memory trouble of vLLM servers from /metrics and logs."""

__version__ = "0.1.0"
