"""The whole pipeline (simulated backend, results, dispatchers, ingest) started as processes.

Each service reads its settings from the environment, exactly as when a user starts it by hand;
this class only chooses the ports, the topic prefix and the data paths, so several pipelines
(a demo, a test) can share one broker without touching each other's topics. On a secured broker
each service connects as its own principal: `service_env` holds, per service, the variables only
that service gets (its ``INFERQ_KAFKA_SASL_USERNAME`` and password, its certificate).
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from inferq.tools.stack.process import ServiceProcess


class PortsInUseError(RuntimeError):
    pass


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        # SO_REUSEADDR: a port held only by TIME_WAIT connections of a stopped server is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass(frozen=True)
class PipelinePorts:
    ingest: int = 8700
    results: int = 8701
    dispatcher: int = 8702
    backend: int = 8780
    # /metrics of ingest and of the results service, each on a port of its own (results replica i:
    # + 10 i); 0: any free port (nothing here reads them).
    ingest_metrics: int = 0
    results_metrics: int = 0


@dataclass
class Pipeline:
    bootstrap: str
    work_dir: Path
    ports: PipelinePorts = field(default_factory=PipelinePorts)
    topic_prefix: str = "inferq"
    budget: int = 10
    backend_args: list[str] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)
    # Per service ("ingest", "dispatcher", "results", "sim-backend"): on top of extra_env, for it only.
    service_env: dict[str, dict[str, str]] = field(default_factory=dict)
    # Named simulated backends beside the first, each a process on its own port (the first's port
    # + 100, + 200...): the dispatchers' INFERQ_DISPATCHER_BACKENDS names them;
    # INFERQ_DISPATCHER_TIER_BACKENDS (extra_env) says which tiers call them, in which order.
    spare_backends: tuple[str, ...] = ()
    # Per service: the `inferq` command to run it with (another install's, e.g. a wheel's venv) and
    # the folder it runs in; default this interpreter's, in the current folder.
    service_command: dict[str, list[str]] = field(default_factory=dict)
    service_cwd: Path | None = None
    # Results replicas: the first on `ports.results` with `results.db`, replica i on the port + 10 i
    # with `results-<i>.db`, all in the one results group (any of them answers any request).
    results_replicas: int = 1
    processes: list[ServiceProcess] = field(default_factory=list)
    dispatchers: list[ServiceProcess] = field(default_factory=list)

    @property
    def ingest_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.ingest}"

    @property
    def results_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.results}"

    def results_replica_url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.ports.results + 10 * index}"

    @property
    def ingest_metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.ingest_metrics}"

    def results_metrics_url(self, index: int = 0) -> str:
        """Results replica `index`'s /metrics address (its own port, not the API's)."""
        return f"http://127.0.0.1:{self._results_metrics_port(index)}"

    def _results_metrics_port(self, index: int) -> int:
        return self.ports.results_metrics + 10 * index if self.ports.results_metrics else 0

    def results_db(self, index: int = 0) -> Path:
        """Replica `index`'s own database."""
        return self.work_dir / ("results.db" if index == 0 else f"results-{index}.db")

    @property
    def results_processes(self) -> list[ServiceProcess]:
        return [p for p in self.processes if p.name == "results" or p.name.startswith("results-")]

    @property
    def backend_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.backend}"

    def spare_url(self, name: str) -> str:
        """The base URL of the spare simulated backend `name`."""
        return f"http://127.0.0.1:{self._spare_port(name)}"

    def _spare_port(self, name: str) -> int:
        return self.ports.backend + 100 * (1 + self.spare_backends.index(name))

    def _env(self) -> dict[str, str]:
        spares = {name: {"url": f"{self.spare_url(name)}/v1"} for name in self.spare_backends}
        return {
            "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            "INFERQ_TOPIC_PREFIX": self.topic_prefix,
            "INFERQ_DISPATCHER_BACKEND_URL": f"{self.backend_url}/v1",
            "INFERQ_BUDGET": str(self.budget),
            # The dispatchers' group; ingest's admission reads its lag as the backlog.
            "INFERQ_DISPATCHER_GROUP_ID": f"{self.topic_prefix}-dispatcher",
            "INFERQ_RESULTS_GROUP_ID": f"{self.topic_prefix}-results",
            "INFERQ_RESULTS_DB_PATH": str(self.work_dir / "results.db"),
            # Any free port for /metrics of a service started beside these (another ingest replica):
            # the defaults would collide; the pipeline's own get theirs on the command line.
            "INFERQ_INGEST_METRICS_PORT": "0",
            "INFERQ_RESULTS_METRICS_PORT": "0",
            **({"INFERQ_DISPATCHER_BACKENDS": json.dumps(spares)} if spares else {}),
            **self.extra_env,
        }

    def _process(self, name: str, args: list[str], *, service: str | None = None) -> ServiceProcess:
        env = self._env() | self.service_env.get(service or name, {})
        proc = ServiceProcess(name, args, self.work_dir / "logs" / f"{name}.log", env=env)
        if (service or name) in self.service_command:
            proc.command, proc.cwd = self.service_command[service or name], self.service_cwd
        self.processes.append(proc)
        return proc

    def start(self, *, dispatchers: int = 1, timeout_s: float = 60.0) -> dict[str, float]:
        """Start every service and wait until each answers; returns seconds each took to be ready."""
        # Another server on one of our ports would answer our readiness checks in our service's place.
        ports = (
            vars(self.ports)
            | {f"backend {name}": self._spare_port(name) for name in self.spare_backends}
            | {f"results {i}": self.ports.results + 10 * i for i in range(1, self.results_replicas)}
            | {f"results metrics {i}": self._results_metrics_port(i) for i in range(1, self.results_replicas)}
        )
        busy = [f"{name} {port}" for name, port in ports.items() if port and not port_is_free(port)]
        if busy:
            raise PortsInUseError(
                f"ports already in use: {', '.join(busy)}; stop what listens there or choose other ports"
            )
        backend = self._process(
            "sim-backend",
            [
                "sim-backend",
                "--port",
                str(self.ports.backend),
                "--limit",
                str(self.budget),
                *self.backend_args,
            ],
        )
        spares = {
            name: self._process(
                f"sim-backend-{name}",
                [
                    "sim-backend",
                    "--port",
                    str(self._spare_port(name)),
                    "--limit",
                    str(self.budget),
                    *self.backend_args,
                ],
                service="sim-backend",
            )
            for name in self.spare_backends
        }
        replicas = [
            self._process(
                "results" if i == 0 else f"results-{i}",
                [
                    "results",
                    "--port",
                    str(self.ports.results + 10 * i),
                    "--metrics-port",
                    str(self._results_metrics_port(i)),
                ],
                service="results",
            )
            for i in range(self.results_replicas)
        ]
        for i, replica in enumerate(replicas[1:], start=1):
            replica.env["INFERQ_RESULTS_DB_PATH"] = str(self.results_db(i))
        ingest = self._process(
            "ingest",
            ["ingest", "--port", str(self.ports.ingest), "--metrics-port", str(self.ports.ingest_metrics)],
        )
        for proc in (backend, *spares.values(), *replicas, ingest):
            proc.start()
        ready = {"sim-backend": backend.wait_http_ready(f"{self.backend_url}/healthz", timeout_s)}
        for name, proc in spares.items():
            ready[proc.name] = proc.wait_http_ready(f"{self.spare_url(name)}/healthz", timeout_s)
        for _ in range(dispatchers):
            self.add_dispatcher()
        for i, replica in enumerate(replicas):
            ready[replica.name] = replica.wait_http_ready(
                f"{self.results_replica_url(i)}/healthz",
                timeout_s,
                lambda r: r.status_code == 200 and r.json()["status"] == "ok",
            )
        ready["ingest"] = ingest.wait_http_ready(f"{self.ingest_url}/healthz", timeout_s)
        for i, proc in enumerate(self.dispatchers):
            ready[proc.name] = self.wait_dispatcher_assigned(i, timeout_s)
        return ready

    def add_dispatcher(self) -> ServiceProcess:
        """Start one more member of the dispatcher group (not waiting for its assignment)."""
        index = len(self.dispatchers)
        port = self.ports.dispatcher + 10 * index
        proc = self._process(f"dispatcher-{index}", ["dispatcher", "--port", str(port)], service="dispatcher")
        proc.env["INFERQ_DISPATCHER_ID"] = f"{self.topic_prefix}-d{index}"
        proc.start()
        self.dispatchers.append(proc)
        return proc

    def add_ingest(self, port: int, timeout_s: float = 60.0) -> ServiceProcess:
        """Start one more ingest replica on `port` and wait until it answers (a replica behind the same
        load balancer: same topics, same settings)."""
        index = sum(1 for p in self.processes if p.name.startswith("ingest"))
        proc = self._process(f"ingest-{index}", ["ingest", "--port", str(port)], service="ingest")
        proc.start()
        proc.wait_http_ready(f"http://127.0.0.1:{port}/healthz", timeout_s)
        return proc

    def dispatcher_url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.ports.dispatcher + 10 * index}"

    def wait_dispatcher_assigned(self, index: int, timeout_s: float) -> float:
        """Wait until dispatcher `index` owns partitions: before that, requests would wait on a rebalance."""
        return self.dispatchers[index].wait_http_ready(
            f"{self.dispatcher_url(index)}/healthz",
            timeout_s,
            lambda r: r.status_code == 200 and r.json().get("assigned", 0) > 0,
        )

    def backend_stats(self) -> dict[str, object]:
        stats: dict[str, object] = httpx.get(f"{self.backend_url}/stats", timeout=5.0).json()
        return stats

    def stop(self) -> dict[str, int | None]:
        """Stop in dependency order: ingest first (no new work), dispatchers drain, then the rest."""
        codes: dict[str, int | None] = {}
        order = sorted(
            self.processes,
            key=lambda p: ["ingest", "dispatcher", "results", "sim-backend"].index(
                p.name.split("-")[0] if not p.name.startswith("sim") else "sim-backend"
            ),
        )
        for proc in order:
            codes[proc.name] = proc.stop()
        return codes
