"""Bundled demo: a Qwen2.5-0.5B-shaped decoder block whose seams can be routed to kernels.

Importing this package does not import torch; ``frt_dist.demo.decoder`` does.
"""
