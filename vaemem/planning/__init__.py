"""Planning a calibration: which points fix a platform's calibration within a time budget (``vaemem plan``)."""
