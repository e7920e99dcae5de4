"""HTTP ingest: validates a request, picks its tier and writes it durably to the tier's topic."""
