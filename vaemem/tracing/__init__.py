"""The dry run: the exact peak of live tensor bytes of a decode or encode, on fake tensors, on no device."""
