"""The OpenAI-compatible face of ingest: ``POST /v1/chat/completions`` and ``GET /v1/models``.

`body` parses an OpenAI request body (`ChatCompletionBody`); `record` turns it and inferq's headers
into the request record by ingest's own rules (every bound as ``POST /v1/requests``'s; then the
tenant's entitlements, admission and the produce are ingest's, through `SubmitEndpoint`'s steps);
`answers` writes OpenAI's objects (``chat.completion``, its chunks, its errors); `chunks` a streamed
answer's chunks from the chunk records and the result; `endpoint` waits for
the outcome in the delivery hub, fed by the reply topic, and answers.
"""
