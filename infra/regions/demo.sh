#!/usr/bin/env bash
# `make demo-regions`: two Kafka clusters on this machine joined by MirrorMaker 2, as in
# docs/deployment.md#regions. The central cluster runs the dispatcher and the (simulated) LLM
# backend; the eu cluster is where eu's backend produces requests and reads its reply topic. Every
# command here is one a user runs; everything is stopped on the way out (Ctrl-C included).
set -euo pipefail
cd "$(dirname "$0")/../.."
IQ=.venv/bin/inferq
HOME_DIR=.inferq/regions
CENTRAL=127.0.0.1:19092
EU=127.0.0.1:29092
mkdir -p "$HOME_DIR"
pids=()

cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  $IQ mirror stop --home "$HOME_DIR/mirror" >/dev/null || true
  $IQ broker stop --home "$HOME_DIR/eu" >/dev/null || true
  $IQ broker stop --home "$HOME_DIR/central" >/dev/null || true
  echo "stopped; logs and data in $HOME_DIR"
}
trap cleanup EXIT

echo "== two single-node clusters"
$IQ broker start --home "$HOME_DIR/central" --port 19092 --controller-port 19093 --heap 512m
$IQ broker start --home "$HOME_DIR/eu" --port 29092 --controller-port 29093 --heap 512m
echo "== the same topic table on both, with eu's reply topic"
KAFKA_BOOTSTRAP_SERVERS=$CENTRAL $IQ topics create --region eu >/dev/null
KAFKA_BOOTSTRAP_SERVERS=$EU $IQ topics create --region eu >/dev/null
echo "== MirrorMaker 2: eu's requests to central, central's inferq.results.eu back to eu"
$IQ mirror start --home "$HOME_DIR/mirror" --central $CENTRAL --region eu=$EU
$IQ mirror status --home "$HOME_DIR/mirror"

echo "== central: the simulated LLM backend and the dispatcher group (one process here)"
$IQ sim-backend --port 18780 --speed 5 >"$HOME_DIR/backend.log" 2>&1 & pids+=($!)
KAFKA_BOOTSTRAP_SERVERS=$CENTRAL INFERQ_DISPATCHER_BACKEND_URL=http://127.0.0.1:18780/v1 \
  $IQ dispatcher --port 18702 >"$HOME_DIR/dispatcher.log" 2>&1 & pids+=($!)
echo "== eu: a results service reading eu's reply topic"
KAFKA_BOOTSTRAP_SERVERS=$EU INFERQ_RESULTS_DB_PATH="$HOME_DIR/results-eu.db" \
  $IQ results --region eu --port 28701 --metrics-port 28704 >"$HOME_DIR/results-eu.log" 2>&1 & pids+=($!)
for url in http://127.0.0.1:18702/healthz http://127.0.0.1:28701/healthz; do
  for _ in $(seq 120); do curl -sf "$url" >/dev/null && break; sleep 0.5; done
done

echo "== eu's backend: 12 requests over Kafka to the eu cluster, outcomes from eu's reply topic"
: >"$HOME_DIR/prompts.jsonl"
for n in $(seq 12); do
  echo "{\"prompt\": \"hello from eu, $n\", \"request_id\": \"eu-demo-$$-$n\"}" >>"$HOME_DIR/prompts.jsonl"
done
rm -f "$HOME_DIR/results.jsonl" "$HOME_DIR/results.jsonl.sent"
KAFKA_BOOTSTRAP_SERVERS=$EU $IQ batch submit "$HOME_DIR/prompts.jsonl" --via kafka --region eu \
  --scenario realtime_chat --out "$HOME_DIR/results.jsonl" --no-progress
echo "== the first outcome, as eu's results service serves it"
curl -s "http://127.0.0.1:28701/v1/requests/eu-demo-$$-1?wait=10"; echo
