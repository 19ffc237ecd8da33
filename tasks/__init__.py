"""Fine-tuning tasks: one module per task family (see README.md)."""
