"""The child's side: the worker that runs one task, its memory probes and the rig it describes."""
