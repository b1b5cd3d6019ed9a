"""The `frt` command."""
