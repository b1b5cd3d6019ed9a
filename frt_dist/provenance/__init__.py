"""Who vouches for what: receipt signatures and publisher signatures."""
