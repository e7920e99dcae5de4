"""Apache Kafka's MirrorMaker 2 between a central cluster and regional ones (`inferq mirror`).

`config` decides the flows and the replication policy and writes MirrorMaker's properties;
`mirror` fetches the jars (``infra/kafka/mirror/pom.xml``) and runs, probes and stops the process;
`cli` is the command.
"""
