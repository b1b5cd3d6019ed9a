"""A lock written out in another tool's format: `frt export --format kernels` (kernels' own lock)
and `--format cyclonedx` (an SBOM). Above the lock and the distribution layer, which it reads."""
