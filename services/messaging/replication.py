"""How many copies each topic keeps: chosen from the cluster's size unless the operator says.

With three or more brokers a topic gets replication factor 3 and ``min.insync.replicas=2``: with
the producers' ``acks=all`` a write is acknowledged only once two brokers hold it, so any one broker
may die without losing an acknowledged request or outcome, and writes go on while two remain. With
fewer brokers there is nothing to replicate onto: replication factor 1 and the broker's own
``min.insync.replicas`` (today's single-node behaviour). Flags override either choice.
"""

from __future__ import annotations

from dataclasses import dataclass

# Replicas of each partition on a cluster of at least this many brokers.
CLUSTER_REPLICATION = 3
CLUSTER_MIN_INSYNC = 2


@dataclass(frozen=True, slots=True)
class Replication:
    """Replication factor and min.insync.replicas of the topics to create (None: the broker's)."""

    factor: int = 1
    min_insync: int | None = None

    def __post_init__(self) -> None:
        if self.factor < 1:
            raise ValueError(f"replication factor must be at least 1, got {self.factor}")
        if self.min_insync is not None and not 1 <= self.min_insync <= self.factor:
            raise ValueError(
                f"min.insync.replicas must be 1 to the replication factor ({self.factor}), "
                f"got {self.min_insync}"
            )

    @classmethod
    def for_brokers(
        cls, brokers: int, *, factor: int | None = None, min_insync: int | None = None
    ) -> Replication:
        """The default for a cluster of `brokers`, with the operator's `factor` / `min_insync` on top.

        An explicit factor alone keeps min.insync.replicas at the default's when it fits (at most
        the factor), else the broker's."""
        default = cls(CLUSTER_REPLICATION, CLUSTER_MIN_INSYNC) if brokers >= CLUSTER_REPLICATION else cls()
        chosen_factor = factor if factor is not None else default.factor
        if min_insync is None and default.min_insync is not None and default.min_insync <= chosen_factor:
            min_insync = default.min_insync if chosen_factor > 1 else None
        if chosen_factor > brokers:
            raise ValueError(
                f"replication factor {chosen_factor} needs at least {chosen_factor} brokers; "
                f"the cluster has {brokers}"
            )
        return cls(chosen_factor, min_insync)

    def topic_config(self) -> dict[str, str]:
        """Topic-level settings this replication adds."""
        return {} if self.min_insync is None else {"min.insync.replicas": str(self.min_insync)}

    def describe(self) -> str:
        insync = (
            "the broker's min.insync.replicas"
            if self.min_insync is None
            else (f"min.insync.replicas={self.min_insync}")
        )
        return f"replication factor {self.factor}, {insync}"
