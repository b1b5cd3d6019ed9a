"""Making a project: `frt init` (a new project, or one made from a Hub release), written so that
`frt lock` accepts what it writes (it checks with the lock's own validators, so it sits above the lock)."""
