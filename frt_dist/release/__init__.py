"""Releases on the Hub: publishing a model's manifest, receipts and lock, and consuming one."""
