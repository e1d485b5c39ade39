"""Training-side tools: prompt sources and self-distillation data generation for drafters."""
