"""The Avro schemas and OpenAPI documents, shipped in the wheel as `inferq.schemas` (read with importlib.resources)."""
