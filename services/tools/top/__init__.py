"""`inferq top`: a live terminal view of the running pipeline, read from the services' /metrics."""
