"""Process plumbing: launchers (spawn, fork helper), the helper's channel, the child's environment."""
