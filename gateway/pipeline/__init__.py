"""The request pipeline: one module per stage, run in order before the fallback loop."""
