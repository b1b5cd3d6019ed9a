"""Releases on the Hub, read: a manifest's [release], `frt init --from`, `frt release upgrade|trust`
(below the lock, which pins a release; publishing one is frt_dist.publish)."""
