"""The OpenAI-compatible face of ingest: ``POST /v1/chat/completions`` and ``GET /v1/models``.

`body` turns an OpenAI request body and inferq's headers into ingest's own `SubmitRequest` (so every
bound, the tenant's entitlements, admission and the produce are ingest's, through
`SubmitEndpoint`'s steps); `answers` writes OpenAI's objects (``chat.completion``, its chunks, its
errors); `endpoint` waits for the outcome in the delivery hub, fed by the reply topic, and answers.
"""
