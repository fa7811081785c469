"""Measuring: ``point`` is the identity of a run; ``parent`` plans and records, ``plumbing`` starts and watches
processes, ``child`` runs one task in a fresh process and reports one JSON result."""
