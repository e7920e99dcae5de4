"""`inferq demo`: the whole pipeline on a real local broker, a small mixed workload, a table."""
