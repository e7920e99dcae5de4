"""The pipeline as processes: start the services the way a user does, wait until each is ready,
stop them cleanly. Used by `inferq demo`, the end-to-end tests and the benchmarks."""
