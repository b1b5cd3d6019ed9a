"""Who vouches for what: receipt signatures, publisher signatures, the SBOM."""
