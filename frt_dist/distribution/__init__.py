"""Where a locked file's bytes come from and go to: the Hub, mirror folders, object stores, fleets."""
