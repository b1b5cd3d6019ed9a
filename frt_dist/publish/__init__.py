"""Publishing a locked project as a Hub release (`frt release push`). Above the lock: a release
publishes only a lock that is fresh, which it asks the lock builder. Reading a release
(`frt init --from`, a manifest's [release]) is frt_dist.release, below the lock."""
