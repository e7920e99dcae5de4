"""The results service: one terminal outcome per request_id, served over HTTP."""
