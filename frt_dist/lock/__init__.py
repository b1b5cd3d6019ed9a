"""`frt lock` and what checks a lock: building it, coverage, freshness, `frt verify`."""
