"""Serving: `load(model)` to a plan, the runtime guard and ledger, and the kernelize and vLLM bridges."""
