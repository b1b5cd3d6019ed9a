"""A project's folders (manifests/, receipts/, lockfiles/): finding one, and `frt init`."""
