"""The cupid benchmark: one folder with its schema, loader, context strategies, prompts, judges,
metrics, report and run module."""
