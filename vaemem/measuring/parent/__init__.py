"""The parent's side of a sweep: the plan, the runs' classification, the store and the sweep files."""
