"""The one decoding loop of trees, chains run as trees, and batches, run by `generate` as `custom_generate`."""
