"""What the services share about messages: the Avro envelope, tiers, topics and Kafka client settings.

Public surface:

- `codec`: Avro single-object encoding of `InferenceRequest` / `InferenceResult`.
- `tiers`: `Tier`, the scenario → tier map and per-tier deadlines.
- `topics`: the topic table, declared once.
- `kafka_config`: typed Kafka settings turned into client kwargs at the edge.
- `security`: their transport security (TLS, SCRAM), one block for librdkafka and aiokafka.
- `acls`: what each service may do on the broker, and `apply_grants`.
- `admin`: topic creation and the start-up check (`connection` tells a refusal from an outage).

Errors (``errors``)::

    MessagingError
     ├── DecodeError            bytes that are not a record we can read (poison)
     │    └── UnknownSchemaError  a well-formed header naming a schema we do not hold
     ├── MissingTopicsError     topics a service needs are not on the broker (or not visible to it)
     └── KafkaAccessError       the broker refused us at connection: not retriable
          ├── KafkaAuthenticationError  SASL: wrong user or password
          └── KafkaTlsError             TLS: untrusted certificate, client certificate refused
"""
