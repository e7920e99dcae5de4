"""Run-time files shipped in the wheel as `inferq.infra`: the default schedule, scenarios, the Kafka jars poms, install scripts."""
