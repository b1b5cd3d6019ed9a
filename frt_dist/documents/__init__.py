"""frt's documents: manifests, receipts, a variant's metadata.json and lockfiles, read strictly."""
