"""A project's folders (manifests/, receipts/, lockfiles/): finding one (`frt init` makes one: frt_dist.scaffold)."""
