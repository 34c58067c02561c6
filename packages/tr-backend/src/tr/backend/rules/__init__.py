"""The rules of the ops, one module per op family, written once: each op's attributes with their defaults and
ranges, its arguments' shapes and dtypes. Both backends call them at capture and keep only execution."""
